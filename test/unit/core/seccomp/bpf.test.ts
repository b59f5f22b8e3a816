import t from 'tap';
import {
  assemble,
  BPF_MAXINSNS,
  jeq,
  jset,
  label,
  load,
  NEXT,
  ret,
  serialise,
  type Instruction,
} from '../../../../core/seccomp/bpf.js';
import { compilePolicy, DEFAULT_POLICY, policyProgram, validatePolicy } from '../../../../core/seccomp/policy.js';

t.test('resolves labels to forward offsets relative to the next instruction', async (t) => {
  const out = assemble([load(0), jeq(39, 'hit', NEXT), jset(0x40, NEXT, 'hit'), ret(0), label('hit'), ret(1)]);
  if (!out.ok) throw new Error(out.detail);
  t.same(out.filters, [
    { code: 0x20, jt: 0, jf: 0, k: 0 },
    { code: 0x15, jt: 2, jf: 0, k: 39 },
    { code: 0x45, jt: 0, jf: 1, k: 0x40 },
    { code: 0x06, jt: 0, jf: 0, k: 0 },
    { code: 0x06, jt: 0, jf: 0, k: 1 },
  ]);
});

t.test('serialises struct sock_filter little-endian, 8 bytes each', async (t) => {
  const bytes = serialise([
    { code: 0x15, jt: 1, jf: 2, k: 0xc000003e },
    { code: 0x06, jt: 0, jf: 0, k: 0x7fff0000 },
  ]);
  t.same([...bytes], [0x15, 0x00, 0x01, 0x02, 0x3e, 0x00, 0x00, 0xc0, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x7f]);
});

t.test('jump bounds: 255 is the farthest jump, 256 is refused', async (t) => {
  const filler = (n: number): Instruction[] => Array.from({ length: n }, () => ret(0));
  const at255 = assemble([jeq(1, 'far', NEXT), ...filler(255), label('far'), ret(1)]);
  t.equal(at255.ok, true);
  if (at255.ok) t.equal(at255.filters[0]?.jt, 255);
  const at256 = assemble([jeq(1, 'far', NEXT), ...filler(256), label('far'), ret(1)]);
  t.equal(at256.ok ? 'ok' : at256.reason, 'jump_too_far');
});

t.test('refuses malformed programs', async (t) => {
  const reason = (p: Instruction[]): string => {
    const out = assemble(p);
    return out.ok ? 'ok' : out.reason;
  };
  t.equal(reason([]), 'empty_program');
  t.equal(reason([label('a'), ret(0), label('a'), ret(0)]), 'duplicate_label');
  t.equal(reason([jeq(1, 'nowhere', NEXT), ret(0)]), 'undefined_label');
  t.equal(reason([ret(0), label('end')]), 'undefined_label', 'a label must be followed by an instruction');
  t.equal(reason([label('top'), load(0), jeq(1, 'top', NEXT), ret(0)]), 'backward_jump');
  t.equal(reason([load(64), ret(0)]), 'bad_load_offset', 'past struct seccomp_data');
  t.equal(reason([load(2), ret(0)]), 'bad_load_offset', 'unaligned');
  t.equal(reason([ret(2 ** 32)]), 'bad_immediate');
  t.equal(reason([jeq(-1, NEXT, NEXT), ret(0)]), 'bad_immediate');
  t.equal(reason([load(0)]), 'falls_off_end');
});

t.test('refuses programs longer than BPF_MAXINSNS', async (t) => {
  const max = Array.from({ length: BPF_MAXINSNS }, () => ret(0));
  t.equal(assemble(max).ok, true, `${BPF_MAXINSNS} instructions are accepted`);
  const over = assemble([...max, ret(0)]);
  t.equal(over.ok ? 'ok' : over.reason, 'program_too_long');
});

t.test('default policy compiles; every entry has a reason; duplicates refused', async (t) => {
  const compiled = compilePolicy();
  if (!compiled.ok) throw new Error(compiled.detail);
  t.equal(compiled.program.length, compiled.instructionCount * 8);
  t.ok(compiled.instructionCount < 256, `small program (${compiled.instructionCount} instructions)`);
  t.equal(policyProgram(DEFAULT_POLICY).filter((i) => i.op !== 'label').length, compiled.instructionCount);
  const first = DEFAULT_POLICY[0];
  if (!first) throw new Error('empty policy');
  t.equal(validatePolicy([first, first]).ok, false);
  t.equal(validatePolicy([{ ...first, why: ' ' }]).ok, false);
  t.equal(validatePolicy([{ syscall: 'ioctl', action: 'eperm', when: { arg: 1, oneOf: [] }, why: 'x' }]).ok, false);
});

t.test('argument checks load the low 32-bit word of the argument', async (t) => {
  const program = policyProgram([{ syscall: 'ioctl', action: 'eperm', when: { arg: 1, oneOf: [0x5412] }, why: 'x' }]);
  t.ok(
    program.some((i) => i.op === 'load' && i.offset === 24),
    'args[1] low word is at offset 16 + 8',
  );
  t.notOk(
    program.some((i) => i.op === 'load' && i.offset === 28),
    'the high word is never compared',
  );
});
