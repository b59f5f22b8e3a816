import t from 'tap';
import { EgressTally, LISTED_DENIALS } from '../../../proxy/egress-summary.js';
import { egressDenialLines } from '../../../supervisor/cli/format.js';

t.test('the tally counts every connection and denial and names only the first denials', async (t) => {
  const tally = new EgressTally();
  t.same(tally.summary(), {
    connections: 0,
    bytesUp: 0,
    bytesDown: 0,
    denials: 0,
    firstDenials: [],
    unlistedDenials: 0,
  });
  tally.connection({ bytesUp: 10, bytesDown: 200 });
  tally.connection({ bytesUp: 5, bytesDown: 0 });
  for (let i = 0; i < LISTED_DENIALS + 3; i++)
    tally.denial({ host: `h${i}.example`, port: 443, reason: 'not_allowlisted' });
  const summary = tally.summary();
  t.match(summary, { connections: 2, bytesUp: 15, bytesDown: 200, denials: LISTED_DENIALS + 3, unlistedDenials: 3 });
  t.equal(summary.firstDenials.length, LISTED_DENIALS);
  t.same(summary.firstDenials[0], { host: 'h0.example', port: 443, reason: 'not_allowlisted' }, 'in order');
});

t.test('run names each denial, brackets IPv6 hosts and counts the rest', async (t) => {
  t.same(
    egressDenialLines({
      firstDenials: [
        { host: 'example.com', port: 443, reason: 'not_allowlisted' },
        { host: '::1', port: 80, reason: 'denied_address_class' },
        { host: 'bad host', port: null, reason: 'invalid_host' },
      ],
      unlistedDenials: 2,
    }),
    [
      'egress denied: example.com:443 (not_allowlisted)',
      'egress denied: [::1]:80 (denied_address_class)',
      'egress denied: bad host (invalid_host)',
      'egress denied 2 more times (turnhost events --kind egress_denial)',
    ],
  );
  t.same(egressDenialLines({ firstDenials: [], unlistedDenials: 0 }), []);
});
