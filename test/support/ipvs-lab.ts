// The IPVS lab from the host's side: boots the guest that scripts/build-ipvs-lab.sh builds
// (Debian's kernel, with IPVS, under QEMU) and runs commands inside it. The guest sees this host's
// root filesystem read-only (so the same binaries, node and the checkout) and a per-boot io folder
// at /run/lab. A command is a file req/<n>.sh in that folder; the guest runs it chrooted into the
// host root and leaves res/N.out, res/N.err and res/N.rc. docs/ipvs.md documents the interface.

import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { CommandRunner } from '../../src/host/command.js';
import { type ExecResult, runCommand } from '../../src/host/command.js';

export const PROJECT_ROOT = resolve(import.meta.dirname, '../..');
export const LAB_DIR = join(PROJECT_ROOT, '.cache/ipvs-lab');

/** Runs scripts/build-ipvs-lab.sh (idempotent; installs Debian packages and the kernel once). */
export async function buildIpvsLab(): Promise<void> {
  await runCommand('bash', [join(PROJECT_ROOT, 'scripts/build-ipvs-lab.sh'), LAB_DIR]);
}

/** Shell single-quoting: the guest runs commands through /bin/sh. */
export function shellQuote(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}

export interface BootTimings {
  /** From starting QEMU to the guest accepting commands. */
  bootMs: number;
  accel: 'kvm' | 'tcg';
}

/** QEMU gave up at once (e.g. KVM that cannot run this CPU model): try without KVM. */
class QemuExitedEarly extends Error {}

export class IpvsLabGuest {
  private next = 0;
  private exited = false;
  private console = '';

  private constructor(
    private readonly qemu: ChildProcess,
    /** The io folder on the host; /run/lab in the guest. */
    readonly ioDir: string,
    readonly timings: BootTimings,
  ) {}

  /**
   * Boots a guest (built with buildIpvsLab first) and waits until it takes commands. With KVM
   * usable (/dev/kvm and QEMU starting a `-cpu host` guest) it uses KVM; where QEMU refuses
   * (this project's PVM-based KVM aborts at once) it falls back to emulation.
   */
  static async boot(
    opts: { memMiB?: number; smp?: number; timeoutMs?: number; accel?: 'auto' | 'kvm' | 'tcg' } = {},
  ): Promise<IpvsLabGuest> {
    const accel = opts.accel ?? 'auto';
    if (accel === 'auto' && existsSync('/dev/kvm')) {
      try {
        return await IpvsLabGuest.start('kvm', opts);
      } catch (err) {
        if (!(err instanceof QemuExitedEarly)) throw err;
      }
    }
    return IpvsLabGuest.start(accel === 'kvm' ? 'kvm' : 'tcg', opts);
  }

  private static async start(
    accel: 'kvm' | 'tcg',
    opts: { memMiB?: number; smp?: number; timeoutMs?: number },
  ): Promise<IpvsLabGuest> {
    const runs = join(LAB_DIR, 'runs');
    await mkdir(runs, { recursive: true });
    const ioDir = await mkdtemp(join(runs, `io-${process.pid}-`));
    const started = Date.now();
    const qemu = spawn(join(LAB_DIR, 'run-guest.sh'), [ioDir], {
      env: {
        ...process.env,
        ACCEL: accel,
        MEM: String(opts.memMiB ?? 1024),
        SMP: String(opts.smp ?? 1),
        TMO: '900',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      // Its own process group: shutdown() can stop QEMU under the timeout wrapper by the group's id.
      detached: true,
    });
    const guest = new IpvsLabGuest(qemu, ioDir, { bootMs: 0, accel });
    qemu.stdout?.on('data', (d) => {
      guest.console = (guest.console + d).slice(-20_000);
    });
    qemu.stderr?.on('data', (d) => {
      guest.console = (guest.console + d).slice(-20_000);
    });
    qemu.once('exit', () => {
      guest.exited = true;
    });
    const deadline = started + (opts.timeoutMs ?? 120_000);
    while (!existsSync(join(ioDir, 'req'))) {
      // A KVM "emulation failure" leaves QEMU running with a stopped guest: as good as exited.
      const kvmFailed = accel === 'kvm' && /emulation failure|KVM internal error/.test(guest.console);
      if (guest.exited || kvmFailed || Date.now() > deadline) {
        // QEMU itself gave up (KVM refused the CPU model, an MSR, ...): emulation may still work.
        const early = guest.exited || kvmFailed;
        await guest.shutdown();
        const message = `the ipvs lab guest (${accel}) did not come up; console:\n${guest.console}`;
        throw early ? new QemuExitedEarly(message) : new Error(message);
      }
      await sleep(50);
    }
    guest.timings.bootMs = Date.now() - started;
    return guest;
  }

  /** Runs a shell command line inside the guest (chrooted into the host root, cwd /run/lab). */
  async sh(script: string, opts: { input?: string; timeoutMs?: number } = {}): Promise<ExecResult> {
    const n = this.next++;
    const req = join(this.ioDir, 'req');
    const res = join(this.ioDir, 'res');
    let body = script;
    if (opts.input !== undefined) {
      await writeFile(join(req, `${n}.in`), opts.input);
      body = `exec < /run/lab/req/${n}.in\n${script}`;
    }
    await writeFile(join(req, `${n}.tmp`), `cd /run/lab\n${body}\n`);
    await rename(join(req, `${n}.tmp`), join(req, `${n}.sh`));
    const deadline = Date.now() + (opts.timeoutMs ?? 120_000);
    while (!existsSync(join(res, `${n}.rc`))) {
      if (this.exited) throw new Error(`the ipvs lab guest exited; console:\n${this.console}`);
      if (Date.now() > deadline) throw new Error(`guest command timed out: ${script}`);
      await sleep(10);
    }
    const [stdout, stderr, rc] = await Promise.all(
      ['out', 'err', 'rc'].map((ext) => readFile(join(res, `${n}.${ext}`), 'utf8')),
    );
    return { stdout: stdout as string, stderr: stderr as string, code: Number((rc as string).trim()) };
  }

  /** A CommandRunner whose commands run inside the guest: hand it to the applier or cleanup. */
  readonly exec: CommandRunner = async (cmd, args, opts = {}) => {
    const result = await this.sh([cmd, ...args].map(shellQuote).join(' '), { input: opts.input });
    if (result.code !== 0 && !opts.allowFailure) {
      throw new Error(
        `${cmd} ${args.join(' ')} failed in the guest (${result.code}): ${result.stderr.trim()}`,
      );
    }
    return result;
  };

  /** Powers the guest off (or kills QEMU) and removes the io folder. */
  async shutdown(): Promise<void> {
    if (!this.exited) {
      await writeFile(join(this.ioDir, 'poweroff'), '').catch(() => undefined);
      const exited = new Promise<void>((resolve) => this.qemu.once('exit', () => resolve()));
      const timer = setTimeout(() => {
        if (this.qemu.pid !== undefined) process.kill(-this.qemu.pid, 'SIGKILL');
      }, 10_000);
      await exited;
      clearTimeout(timer);
    }
    await rm(this.ioDir, { recursive: true, force: true });
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
