import { describe, expect, it } from 'vitest';
import { flockHolders } from '../../src/host/pin-lock.js';

// /proc/locks as Linux 6.18 writes it (fs/locks.c lock_get_status): device as hex major:minor.
const PROC_LOCKS = [
  '1: FLOCK  ADVISORY  WRITE 4242 00:2a:1234 0 EOF',
  '1: -> FLOCK  ADVISORY  WRITE 5151 00:2a:1234 0 EOF',
  '2: POSIX  ADVISORY  WRITE 777 00:2a:1234 0 EOF',
  '3: FLOCK  ADVISORY  WRITE 888 00:2b:1234 0 EOF',
  '4: FLOCK  ADVISORY  WRITE 999 fd:01:99 0 EOF',
  '',
].join('\n');

describe('flockHolders', () => {
  it('finds the holder of a flock on the inode, not its waiters, POSIX locks or other devices', () => {
    expect(flockHolders(PROC_LOCKS, { major: 0, minor: 0x2a, inode: 1234n })).toEqual([4242]);
  });

  it('reads hex device numbers', () => {
    expect(flockHolders(PROC_LOCKS, { major: 0xfd, minor: 1, inode: 99n })).toEqual([999]);
  });

  it('finds nobody when nothing holds the inode', () => {
    expect(flockHolders(PROC_LOCKS, { major: 0, minor: 0x2a, inode: 1n })).toEqual([]);
  });
});
