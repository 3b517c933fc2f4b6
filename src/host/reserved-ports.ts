// The SNAT port range reserved on the node (net.ipv4.ip_local_reserved_ports), so that the host's
// own connections never take a port the datapath hands out to translated flows: the kernel skips
// reserved ports when it picks an ephemeral port (connect() and bind(0)), whatever
// ip_local_port_range says. The agent adds the range at start and puts the previous value back on
// a clean exit. The sysctl is per network namespace; it is read and written with synchronous
// calls, from the thread (and so the namespace) the agent runs in.
//
// What the agent wrote is recorded in a state file, so that after a crash the next start still
// knows the value from before the first one, and a clean exit restores that.

import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

export const RESERVED_PORTS_SYSCTL = '/proc/sys/net/ipv4/ip_local_reserved_ports';

export type PortRange = readonly [number, number];

/** "8080,9000-9010" -> [[8080, 8080], [9000, 9010]]; an empty value is no range. */
export function parsePortList(value: string): PortRange[] {
  const ranges: PortRange[] = [];
  for (const part of value.trim().split(',')) {
    const item = part.trim();
    if (!item) continue;
    const m = /^(\d+)(?:-(\d+))?$/.exec(item);
    if (!m) throw new Error(`ip_local_reserved_ports: cannot read "${item}"`);
    const lo = Number(m[1]);
    const hi = m[2] === undefined ? lo : Number(m[2]);
    ranges.push([Math.min(lo, hi), Math.max(lo, hi)]);
  }
  return ranges;
}

/** Sorted, with overlapping and adjacent ranges merged. */
export function normalisePorts(ranges: readonly PortRange[]): PortRange[] {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0]);
  const out: [number, number][] = [];
  for (const [lo, hi] of sorted) {
    const last = out[out.length - 1];
    if (last && lo <= last[1] + 1) last[1] = Math.max(last[1], hi);
    else out.push([lo, hi]);
  }
  return out;
}

/** The kernel's own spelling: "a,b-c". */
export function formatPortList(ranges: readonly PortRange[]): string {
  return normalisePorts(ranges)
    .map(([lo, hi]) => (lo === hi ? String(lo) : `${lo}-${hi}`))
    .join(',');
}

/** Does the list already reserve every port of `range`? */
export function coversRange(ranges: readonly PortRange[], [lo, hi]: PortRange): boolean {
  return normalisePorts(ranges).some(([a, b]) => a <= lo && hi <= b);
}

interface State {
  /** The value before the agent first added its range. */
  previous: string;
  /** The value the agent wrote. */
  written: string;
}

export interface PortReservation {
  /** The value in force after the reservation. */
  readonly value: string;
  /** Puts the previous value back, unless someone else changed the sysctl since. */
  release(): void;
}

const readSysctl = (path: string) => readFileSync(path, 'utf8').trim();

/**
 * Adds `range` to ip_local_reserved_ports. `statePath` remembers the value from before (see the
 * top of the file); `sysctlPath` is for tests of the file handling only.
 */
export function reservePorts(
  range: PortRange,
  statePath: string,
  sysctlPath: string = RESERVED_PORTS_SYSCTL,
): PortReservation {
  const current = readSysctl(sysctlPath);
  let previous = current;
  if (existsSync(statePath)) {
    // A run that did not exit cleanly: its value is still in force, the one before it is the
    // one to restore.
    try {
      const state = JSON.parse(readFileSync(statePath, 'utf8')) as State;
      if (formatPortList(parsePortList(state.written)) === formatPortList(parsePortList(current)))
        previous = state.previous;
    } catch {
      // An unreadable state file: the value in force is the previous one.
    }
  }
  const ranges = parsePortList(current);
  const written = coversRange(ranges, range) ? current : formatPortList([...ranges, range]);
  // The record first: a value the agent cannot record, it does not write.
  mkdirSync(dirname(statePath), { recursive: true });
  writeFileSync(statePath, JSON.stringify({ previous, written } satisfies State));
  if (written !== current) writeFileSync(sysctlPath, written);
  const value = readSysctl(sysctlPath);
  return {
    value,
    release() {
      const now = readSysctl(sysctlPath);
      if (formatPortList(parsePortList(now)) === formatPortList(parsePortList(value)) && now !== previous)
        writeFileSync(sysctlPath, previous === '' ? '\n' : previous);
      rmSync(statePath, { force: true });
    },
  };
}
