// BPF_PROG_TEST_RUN: one program run on a given packet (and context) by the kernel.

import koffi from 'koffi';
import { check, f } from './bindings.js';

export interface TestRunOptions {
  data: Buffer;
  repeat?: number;
  /** __sk_buff (tc) or xdp_md (XDP) context passed to the program. */
  ctx?: Buffer;
  /** Room for the output packet; defaults to the input length + 256. */
  dataOutSize?: number;
}

export interface TestRunResult {
  retval: number;
  /** Average ns per run as the kernel measured it. */
  durationNs: number;
  dataOut: Buffer;
}

export function testRun(progFd: number, options: TestRunOptions): TestRunResult {
  const dataOut = Buffer.alloc(options.dataOutSize ?? options.data.length + 256);
  const opts = Buffer.alloc(80);
  opts.writeBigUInt64LE(80n, 0);
  opts.writeBigUInt64LE(koffi.address(options.data), 8);
  opts.writeBigUInt64LE(koffi.address(dataOut), 16);
  opts.writeUInt32LE(options.data.length, 24);
  opts.writeUInt32LE(dataOut.length, 28);
  if (options.ctx) {
    opts.writeBigUInt64LE(koffi.address(options.ctx), 32);
    opts.writeUInt32LE(options.ctx.length, 48);
  }
  opts.writeUInt32LE(options.repeat ?? 1, 60);
  check('bpf_prog_test_run_opts', f.test_run(progFd, opts) as number);
  return {
    retval: opts.readInt32LE(56),
    durationNs: opts.readUInt32LE(64),
    dataOut: dataOut.subarray(0, opts.readUInt32LE(28)),
  };
}
