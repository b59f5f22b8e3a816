/**
 * What the attack battery aims at on the host, made for one run and removed after it: a file in
 * the host's /tmp and /dev/shm, a host unix socket (by path and by abstract name), a loopback
 * TCP listener, and a setuid-root copy of the battery (a root supervisor only: nobody else can
 * make one). Each is something the turn must not reach; the battery's control reaches each
 * from outside, so a case cannot hold because its target was never there.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

const CONTENT = 'turnhost attack fixture\n';

function listen(server: net.Server, ...args: [string] | [number, string]): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    if (args.length === 1) server.listen(args[0], resolve);
    else server.listen(args[0], args[1], resolve);
  });
}

function closeServer(server: net.Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

export class AttackFixtures {
  private readonly servers: net.Server[] = [];
  private readonly files: string[] = [];
  private readonly dirs: string[] = [];
  /** The host directory holding the fixtures, also where the control writes its bytes. */
  readonly dir: string;
  readonly hostTmpFile: string;
  readonly hostShmFile: string | undefined;
  readonly unixPath: string;
  readonly abstractName: string;
  tcpPort = 0;

  private constructor(readonly tag: string) {
    this.dir = fs.mkdtempSync(path.join('/tmp', 'turnhost-attack-'));
    this.dirs.push(this.dir);
    fs.chmodSync(this.dir, 0o755);
    this.hostTmpFile = path.join(this.dir, 'host-file');
    fs.writeFileSync(this.hostTmpFile, CONTENT, { mode: 0o644 });
    const shm = path.join('/dev/shm', `turnhost-attack-${tag}`);
    this.hostShmFile = fs.existsSync('/dev/shm') ? shm : undefined;
    if (this.hostShmFile !== undefined) {
      fs.writeFileSync(this.hostShmFile, CONTENT, { mode: 0o644 });
      this.files.push(this.hostShmFile);
    }
    this.unixPath = path.join(this.dir, 'host.sock');
    this.abstractName = `turnhost-attack-${tag}`;
  }

  /** Makes every fixture; on a failure what was made is removed and the error thrown. */
  static async create(): Promise<AttackFixtures> {
    const fixtures = new AttackFixtures(crypto.randomBytes(6).toString('hex'));
    try {
      await fixtures.startListeners();
      return fixtures;
    } catch (error) {
      await fixtures.remove();
      throw error;
    }
  }

  private async startListeners(): Promise<void> {
    const answer = (socket: net.Socket): void => {
      socket.on('error', () => socket.destroy());
      socket.end(CONTENT);
    };
    const unix = net.createServer(answer);
    this.servers.push(unix);
    await listen(unix, this.unixPath);
    // Reachable by any uid that can see it: only the view and the namespaces keep it out.
    fs.chmodSync(this.unixPath, 0o777);
    const abstract = net.createServer(answer);
    this.servers.push(abstract);
    await listen(abstract, `\0${this.abstractName}`);
    const tcp = net.createServer(answer);
    this.servers.push(tcp);
    await listen(tcp, 0, '127.0.0.1');
    this.tcpPort = (tcp.address() as net.AddressInfo).port;
  }

  /**
   * A setuid-root copy of the battery in `dir` (which the turn sees), or undefined when this
   * process is not root and so cannot make one.
   */
  /**
   * The battery where the attack turn sees it: its own directory. The build's copy may lie under
   * a path the view hides or replaces (a checkout under /tmp or /root).
   */
  visibleCopy(battery: string, dir: string): string {
    const copy = path.join(dir, `attack-battery-${this.tag}`);
    fs.copyFileSync(battery, copy);
    fs.chmodSync(copy, 0o755);
    this.files.push(copy);
    return copy;
  }

  setuidCopy(battery: string, dir: string): string | undefined {
    if (process.geteuid?.() !== 0) return undefined;
    const copy = path.join(dir, `attack-battery-setuid-${this.tag}`);
    fs.copyFileSync(battery, copy);
    fs.chownSync(copy, 0, 0);
    fs.chmodSync(copy, 0o4755);
    this.files.push(copy);
    return copy;
  }

  /** A directory for the attack turn's cwd when it is not a workspace turn. */
  plainCwd(root: string): string {
    const dir = fs.mkdtempSync(path.join(root, '.turnhost-attack-'));
    fs.chmodSync(dir, 0o755);
    this.dirs.push(dir);
    return dir;
  }

  async remove(): Promise<void> {
    await Promise.all(this.servers.map(closeServer));
    for (const file of this.files) fs.rmSync(file, { force: true });
    for (const dir of this.dirs) fs.rmSync(dir, { recursive: true, force: true });
  }
}
