import t from 'tap';
import {
  ATTACK_CASES,
  attackRequirement,
  countCases,
  pairCases,
  parseBatteryOutput,
} from '../../../../supervisor/probes/attack-results.js';

const AT = '2026-01-01T00:00:00.000Z';
const line = (name: string, key: 'result' | 'control', value: string, evidence = 'e'): string =>
  JSON.stringify({ case: name, [key]: value, evidence });
const every = (key: 'result' | 'control', value: string): string =>
  ATTACK_CASES.map((name) => line(name, key, value)).join('\n') + '\n';

function attackLines(output: string) {
  const parsed = parseBatteryOutput(output, 'result');
  if (!parsed.ok) throw new Error(parsed.detail);
  return parsed.lines;
}

function controlLines(output: string) {
  const parsed = parseBatteryOutput(output, 'control');
  if (!parsed.ok) throw new Error(parsed.detail);
  return parsed.lines;
}

t.test('the output is read strictly, naming the line', async (t) => {
  const refused: Array<[string, RegExp]> = [
    ['not json\n', /line 1: not JSON/],
    ['[1]\n', /line 1: not a JSON object/],
    [JSON.stringify({ case: 'seccomp.ptrace', result: 'held', evidence: 'x', extra: 1 }) + '\n', /keys/],
    [line('seccomp.nope', 'result', 'held') + '\n', /unknown case "seccomp.nope"/],
    [line('seccomp.ptrace', 'result', 'fine') + '\n', /verdict "fine"/],
    [
      line('seccomp.ptrace', 'result', 'held') + '\n' + line('seccomp.ptrace', 'result', 'held') + '\n',
      /line 2: seccomp.ptrace reported twice/,
    ],
    [line('seccomp.ptrace', 'result', 'pending') + '\n', /verdict "pending"/],
    [JSON.stringify({ case: 'seccomp.ptrace', result: 1, evidence: 'x' }) + '\n', /must be strings/],
  ];
  for (const [output, detail] of refused) {
    const parsed = parseBatteryOutput(output, 'result');
    t.equal(parsed.ok, false, output);
    if (!parsed.ok) t.match(parsed.detail, detail);
  }
  const partial = parseBatteryOutput(line('seccomp.ptrace', 'control', 'ok') + '\n', 'control');
  t.equal(partial.ok, false, 'a control run must report every case');
  if (!partial.ok) t.match(partial.detail, /no line for identity\.uid/);
});

t.test('a case is its attack, unless its control did not succeed', async (t) => {
  const control = controlLines(
    every('control', 'ok').replace(
      line('seccomp.x32_entry', 'control', 'ok'),
      line('seccomp.x32_entry', 'control', 'failed', 'killed by signal 11 outside'),
    ),
  );
  const attack = attackLines(
    every('result', 'held').replace(
      line('seccomp.bpf', 'result', 'held'),
      line('seccomp.bpf', 'result', 'broken', 'EINVAL'),
    ),
  );
  const cases = pairCases(attack, control, { status: 'ok', endedByMemory: false }, 'ordinary', AT);
  const byName = new Map(cases.map((c) => [c.case, c]));
  t.equal(cases.length, ATTACK_CASES.length);
  t.same(byName.get('seccomp.ptrace'), {
    case: 'seccomp.ptrace',
    mode: 'ordinary',
    result: 'held',
    reason: 'e',
    checkedAt: AT,
  });
  t.equal(byName.get('seccomp.x32_entry')?.result, 'skipped', 'a failed control cannot attest the case');
  t.match(byName.get('seccomp.x32_entry')?.reason, /control failed outside the sandbox: killed by signal 11/);
  t.equal(byName.get('seccomp.bpf')?.result, 'broken');
  t.same(countCases(cases), { held: ATTACK_CASES.length - 2, broken: 1, skipped: 1 });
  t.match(attackRequirement(cases, 'ordinary'), /seccomp\.bpf must hold .*EINVAL/);
  t.equal(attackRequirement(cases, 'restricted'), undefined, 'another mode is not named');
});

t.test('the case that may end the turn', async (t) => {
  const control = controlLines(every('control', 'ok'));
  const upToMemory = ATTACK_CASES.filter((name) => name !== 'limits.memory')
    .map((name) => line(name, 'result', 'held'))
    .join('\n');
  const pending = `${upToMemory}\n${line('limits.memory', 'result', 'pending')}\n`;
  const killed = pairCases(
    attackLines(pending),
    control,
    { status: 'oom_killed', endedByMemory: true },
    'ordinary',
    AT,
  );
  t.equal(
    killed.find((c) => c.case === 'limits.memory')?.result,
    'held',
    'the OOM kill of the turn is the limit holding',
  );
  const otherEnd = pairCases(
    attackLines(pending),
    control,
    { status: 'timeout', endedByMemory: false },
    'ordinary',
    AT,
  );
  const memory = otherEnd.find((c) => c.case === 'limits.memory');
  t.equal(memory?.result, 'broken', 'any other end is not');
  t.match(memory?.reason, /ended \(timeout\) before limits\.memory reported/);
  const finished = `${pending}${line('limits.memory', 'result', 'held', 'killed by signal 9')}\n`;
  t.equal(
    pairCases(attackLines(finished), control, { status: 'ok', endedByMemory: false }, 'ordinary', AT).find(
      (c) => c.case === 'limits.memory',
    )?.reason,
    'killed by signal 9',
    'a final line after pending is the verdict',
  );
  const silent = pairCases(
    attackLines(upToMemory.split('\n').slice(0, 3).join('\n') + '\n'),
    control,
    { status: 'signaled', endedByMemory: false },
    'ordinary',
    AT,
  );
  t.equal(silent.find((c) => c.case === 'network.only_lo')?.result, 'broken', 'a case with no line is broken');
});
