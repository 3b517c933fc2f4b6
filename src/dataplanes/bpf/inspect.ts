// Opening the live pinned maps of a running (or stopped) agent, and its names for the frontends:
// what `list` (inspect-list.ts) and `trace` (inspect-trace.ts) read. Nothing here writes to the
// kernel.

import { existsSync, readFileSync } from 'node:fs';
import { mapInfo } from '../../../native/libbpf/map.js';
import { getPinned } from '../../../native/libbpf/object.js';
import { closeFd } from '../../../native/libc.js';
import { BPFFS_ROOT, notOnBpffs } from '../../host/bpffs.js';
import { KernelStore } from './kernel-store.js';
import { MAPS } from './layout.js';
import { type FrontendNames, namesFilePath } from './names-file.js';
import { type MapName, mapPinPath, PIN_LAYOUT_VERSION } from './object.js';

export interface PinnedMaps {
  pinDir: string;
  fd: Record<MapName, number>;
  store: KernelStore;
  close(): void;
}

/** Opens every pinned map of a running (or stopped) agent. */
export function openPinnedMaps(pinPath: string): PinnedMaps {
  // A reader never mounts bpffs: a fresh, empty mount would only hide where the pins could be.
  const why = notOnBpffs(pinPath);
  if (why) {
    throw new Error(
      `nothing is pinned under ${pinPath}: ${why} (an agent in bpf mode mounts bpffs at ${BPFFS_ROOT} when it starts; is one running?)`,
    );
  }
  const pinDir = `${pinPath}/${PIN_LAYOUT_VERSION}`;
  const fd = {} as Record<MapName, number>;
  const capacity = {} as Record<MapName, number>;
  const opened: number[] = [];
  try {
    for (const name of Object.keys(MAPS) as MapName[]) {
      const path = mapPinPath(pinDir, name);
      if (!existsSync(path)) {
        throw new Error(
          `${path} does not exist: no bpf data plane pinned under ${pinPath} (is the agent running with --proxy-mode bpf?)`,
        );
      }
      fd[name] = getPinned(path);
      opened.push(fd[name]);
      capacity[name] = mapInfo(fd[name]).maxEntries;
    }
  } catch (err) {
    for (const f of opened) closeFd(f);
    throw err;
  }
  return { pinDir, fd, store: new KernelStore(fd, capacity), close: () => opened.forEach(closeFd) };
}

/** The agent's names for frontends (service port and kind), when it wrote them. */
export function readFrontendNames(pinPath: string, path = namesFilePath(pinPath)): Map<number, string> {
  try {
    const names = JSON.parse(readFileSync(path, 'utf8')) as FrontendNames;
    return new Map(names.frontends.map((f) => [f.serviceId, f.servicePortName]));
  } catch {
    return new Map();
  }
}
