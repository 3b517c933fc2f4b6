import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { coversRange, formatPortList, parsePortList, reservePorts } from '../../src/host/reserved-ports.js';

describe('ip_local_reserved_ports', () => {
  it('reads, merges and writes the kernel spelling', () => {
    expect(parsePortList('')).toEqual([]);
    expect(parsePortList('8080,9000-9010\n')).toEqual([
      [8080, 8080],
      [9000, 9010],
    ]);
    expect(formatPortList([...parsePortList('61000-62000,8080'), [61500, 65535]])).toBe('8080,61000-65535');
    expect(
      formatPortList([
        [1, 2],
        [3, 3],
      ]),
    ).toBe('1-3');
    expect(coversRange(parsePortList('60000-65535'), [61000, 65535])).toBe(true);
    expect(coversRange(parsePortList('61000-62000,62002-65535'), [61000, 65535])).toBe(false);
    expect(() => parsePortList('80,x')).toThrow(/cannot read/);
  });

  describe('reservePorts (on a file standing in for the sysctl)', () => {
    let dir = '';
    afterEach(() => rmSync(dir, { recursive: true, force: true }));
    const setup = (value: string) => {
      dir = mkdtempSync(join(tmpdir(), 'hdp-rp-unit-'));
      const sysctl = join(dir, 'sysctl');
      writeFileSync(sysctl, `${value}\n`);
      return { sysctl, state: join(dir, 'state.json'), read: () => readFileSync(sysctl, 'utf8').trim() };
    };

    it('leaves a value that already covers the range alone, and does not touch it on release', () => {
      const f = setup('1-65535');
      const r = reservePorts([61000, 65535], f.state, f.sysctl);
      expect(r.value).toBe('1-65535');
      r.release();
      expect(f.read()).toBe('1-65535');
    });

    it('keeps a value someone else changed after the reservation', () => {
      const f = setup('');
      const r = reservePorts([61000, 65535], f.state, f.sysctl);
      expect(f.read()).toBe('61000-65535');
      writeFileSync(f.sysctl, '443,61000-65535');
      r.release();
      expect(f.read()).toBe('443,61000-65535');
    });
  });
});
