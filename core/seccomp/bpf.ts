/**
 * A small classic-BPF assembler for seccomp filters.
 *
 * Programs are written as typed instructions with symbolic jump targets; `assemble` resolves
 * the labels and refuses anything the kernel would refuse (backward or out-of-range jumps,
 * more than BPF_MAXINSNS instructions, loads outside `struct seccomp_data`, a program that
 * can run off its end). `serialise` writes the 8-byte `struct sock_filter` layout
 * (u16 code, u8 jt, u8 jf, u32 k, little-endian) that `struct sock_fprog` points to.
 *
 * Only the instructions a seccomp policy needs exist: absolute 32-bit load, JEQ/JSET with an
 * immediate, and RET with an immediate.
 */
import { fail, ok, type Result } from '../result.js';

/** The kernel's limit on classic BPF program length (include/uapi/linux/bpf_common.h). */
export const BPF_MAXINSNS = 4096;
/** jt/jf are u8 instruction counts relative to the next instruction. */
const BPF_MAX_JUMP = 255;
/** sizeof(struct seccomp_data): nr(4) arch(4) instruction_pointer(8) args(6 * 8). */
const SECCOMP_DATA_SIZE = 64;
const SOCK_FILTER_SIZE = 8;

const BPF_LD_W_ABS = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JMP_JEQ_K = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JMP_JSET_K = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const BPF_RET_K = 0x06; // BPF_RET | BPF_K

/** A jump target: a label name, or NEXT for "fall through to the following instruction". */
export const NEXT = Symbol('next');
export type Target = string | typeof NEXT;

export type Instruction =
  | { op: 'load'; offset: number }
  | { op: 'jeq'; k: number; jt: Target; jf: Target }
  | { op: 'jset'; k: number; jt: Target; jf: Target }
  | { op: 'ret'; k: number }
  | { op: 'label'; name: string };

export interface SockFilter {
  code: number;
  jt: number;
  jf: number;
  k: number;
}

export type AssembleFailure =
  | 'empty_program'
  | 'program_too_long'
  | 'duplicate_label'
  | 'undefined_label'
  | 'backward_jump'
  | 'jump_too_far'
  | 'bad_immediate'
  | 'bad_load_offset'
  | 'falls_off_end';

export const load = (offset: number): Instruction => ({ op: 'load', offset });
export const jeq = (k: number, jt: Target, jf: Target): Instruction => ({ op: 'jeq', k, jt, jf });
export const jset = (k: number, jt: Target, jf: Target): Instruction => ({ op: 'jset', k, jt, jf });
export const ret = (k: number): Instruction => ({ op: 'ret', k });
export const label = (name: string): Instruction => ({ op: 'label', name });

function isU32(value: number): boolean {
  return Number.isInteger(value) && value >= 0 && value <= 0xffffffff;
}

/** Maps each label to the index of the instruction that follows it. */
function resolveLabels(
  program: readonly Instruction[],
): Result<{ labels: Map<string, number>; count: number }, AssembleFailure> {
  const labels = new Map<string, number>();
  let count = 0;
  for (const insn of program) {
    if (insn.op !== 'label') {
      count += 1;
      continue;
    }
    if (labels.has(insn.name)) return fail('duplicate_label', `label "${insn.name}" is defined twice`);
    labels.set(insn.name, count);
  }
  for (const [name, index] of labels) {
    if (index >= count) return fail('undefined_label', `label "${name}" is not followed by an instruction`);
  }
  return ok({ labels, count });
}

function jumpOffset(
  target: Target,
  from: number,
  labels: Map<string, number>,
): Result<{ offset: number }, AssembleFailure> {
  if (target === NEXT) return ok({ offset: 0 });
  const to = labels.get(target);
  if (to === undefined) return fail('undefined_label', `jump to undefined label "${target}"`);
  const offset = to - (from + 1);
  if (offset < 0) return fail('backward_jump', `jump from instruction ${from} to "${target}" goes backwards`);
  if (offset > BPF_MAX_JUMP) {
    return fail('jump_too_far', `jump from instruction ${from} to "${target}" spans ${offset} > ${BPF_MAX_JUMP}`);
  }
  return ok({ offset });
}

function encodeJump(
  code: number,
  insn: { k: number; jt: Target; jf: Target },
  index: number,
  labels: Map<string, number>,
): Result<{ filter: SockFilter }, AssembleFailure> {
  if (!isU32(insn.k)) return fail('bad_immediate', `instruction ${index}: immediate ${insn.k} is not a u32`);
  const jt = jumpOffset(insn.jt, index, labels);
  if (!jt.ok) return jt;
  const jf = jumpOffset(insn.jf, index, labels);
  if (!jf.ok) return jf;
  return ok({ filter: { code, jt: jt.offset, jf: jf.offset, k: insn.k } });
}

function encode(
  insn: Exclude<Instruction, { op: 'label' }>,
  index: number,
  labels: Map<string, number>,
): Result<{ filter: SockFilter }, AssembleFailure> {
  switch (insn.op) {
    case 'load':
      if (
        !Number.isInteger(insn.offset) ||
        insn.offset < 0 ||
        insn.offset % 4 !== 0 ||
        insn.offset + 4 > SECCOMP_DATA_SIZE
      ) {
        return fail(
          'bad_load_offset',
          `instruction ${index}: load offset ${insn.offset} is outside struct seccomp_data`,
        );
      }
      return ok({ filter: { code: BPF_LD_W_ABS, jt: 0, jf: 0, k: insn.offset } });
    case 'jeq':
      return encodeJump(BPF_JMP_JEQ_K, insn, index, labels);
    case 'jset':
      return encodeJump(BPF_JMP_JSET_K, insn, index, labels);
    case 'ret':
      if (!isU32(insn.k)) return fail('bad_immediate', `instruction ${index}: return value ${insn.k} is not a u32`);
      return ok({ filter: { code: BPF_RET_K, jt: 0, jf: 0, k: insn.k } });
  }
}

export function assemble(program: readonly Instruction[]): Result<{ filters: SockFilter[] }, AssembleFailure> {
  const resolved = resolveLabels(program);
  if (!resolved.ok) return resolved;
  if (resolved.count === 0) return fail('empty_program', 'a BPF program needs at least one instruction');
  if (resolved.count > BPF_MAXINSNS) {
    return fail('program_too_long', `${resolved.count} instructions exceed BPF_MAXINSNS (${BPF_MAXINSNS})`);
  }
  const filters: SockFilter[] = [];
  for (const insn of program) {
    if (insn.op === 'label') continue;
    const encoded = encode(insn, filters.length, resolved.labels);
    if (!encoded.ok) return encoded;
    filters.push(encoded.filter);
  }
  // Jumps are forward and bounded, so the only way to run off the end is a last
  // instruction that is not a return.
  if (filters[filters.length - 1]?.code !== BPF_RET_K) {
    return fail('falls_off_end', 'the last instruction must be a return');
  }
  return ok({ filters });
}

/** `struct sock_filter[]` bytes, little-endian as on x86_64. */
export function serialise(filters: readonly SockFilter[]): Buffer {
  const out = Buffer.alloc(filters.length * SOCK_FILTER_SIZE);
  filters.forEach((f, i) => {
    const at = i * SOCK_FILTER_SIZE;
    out.writeUInt16LE(f.code, at);
    out.writeUInt8(f.jt, at + 2);
    out.writeUInt8(f.jf, at + 3);
    out.writeUInt32LE(f.k, at + 4);
  });
  return out;
}
