/** client/package.json: the @turnhost/client manifest, in step with the server's. */
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { REPO_ROOT } from '../../support/turn-harness.js';

type Manifest = { name: string; version: string; type: string; dependencies: Record<string, string> };
const read = (file: string): Manifest => JSON.parse(fs.readFileSync(path.join(REPO_ROOT, file), 'utf8')) as Manifest;

t.test("the client package has the server's version and its ws, and nothing else", async (t) => {
  const server = read('package.json');
  const client = read('client/package.json');
  t.equal(client.name, '@turnhost/client');
  t.equal(client.type, 'module');
  t.equal(client.version, server.version, 'versioned with the server');
  t.same(client.dependencies, { ws: server.dependencies['ws'] }, 'ws alone, the range the server is tested with');
});
