import t from 'tap';
import { parseHelperRefusal, parseReceipt } from '../../../../supervisor/identity/helper-process.js';

t.test('parses refusals by exit code and the identity-helper line', async (t) => {
  t.same(parseHelperRefusal(68, 'identity-helper: uid 5 is outside the worker range 100+10\n'), {
    ok: false,
    reason: 'uid_out_of_range',
    detail: 'uid 5 is outside the worker range 100+10',
  });
  t.same(parseHelperRefusal(80, 'identity-helper: uid 5 is leased to another worker or has live processes\n'), {
    ok: false,
    reason: 'uid_in_use',
    detail: 'uid 5 is leased to another worker or has live processes',
  });
  t.equal(parseHelperRefusal(79, 'identity-helper: x\n'), null, 'the retired temp code is no refusal any more');
  t.equal(parseHelperRefusal(0, ''), null);
  t.equal(parseHelperRefusal(1, 'worker output'), null, 'a worker exit code is not a refusal');
  t.equal(parseHelperRefusal(null, ''), null);
});

t.test('parses receipts: first occurrence wins, values keep spaces', async (t) => {
  t.same(parseReceipt('uid_range 10 20\nworker_uid 10\nworker_uid 11\n\n'), { uid_range: '10 20', worker_uid: '10' });
});
