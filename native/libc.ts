// koffi bindings to the few libc calls the control plane needs. Failures throw NativeError with
// the function name and strerror text.

import koffi from 'koffi';

const libc = koffi.load('libc.so.6');

const c = {
  if_nametoindex: libc.func('unsigned int if_nametoindex(const char *ifname)'),
  close: libc.func('int close(int fd)'),
  open: libc.func('int open(const char *path, int flags)'),
  flock: libc.func('int flock(int fd, int operation)'),
  setns: libc.func('int setns(int fd, int nstype)'),
  mount: libc.func(
    'int mount(const char *source, const char *target, const char *fstype, unsigned long flags, const void *data)',
  ),
  strerror: libc.func('const char *strerror(int errnum)'),
  socket: libc.func('int socket(int domain, int type, int protocol)'),
  sendto: libc.func(
    'intptr_t sendto(int fd, const uint8_t *buf, size_t len, int flags, const uint8_t *addr, uint32_t addrlen)',
  ),
  getsockopt: libc.func(
    'int getsockopt(int fd, int level, int name, _Out_ uint8_t *value, _Inout_ uint32_t *len)',
  ),
  recv: libc.func('intptr_t recv(int fd, _Out_ uint8_t *buf, size_t len, int flags)'),
  malloc_trim: libc.func('int malloc_trim(size_t pad)'),
  fcntl: libc.func('int fcntl(int fd, int cmd, ...)'),
};

export const O_RDONLY = 0;
export const O_CLOEXEC = 0o2000000;
const F_DUPFD_CLOEXEC = 1030;
export const CLONE_NEWNET = 0x40000000;
export const O_DIRECTORY = 0o200000;
export const LOCK_EX = 2;
export const LOCK_NB = 4;
export const EWOULDBLOCK = 11;

export class NativeError extends Error {
  constructor(
    readonly fn: string,
    readonly errno: number,
    detail?: string,
  ) {
    super(`${fn}${detail ? ` (${detail})` : ''}: ${strerror(errno)} (errno ${errno})`);
    this.name = 'NativeError';
  }
}

export function strerror(errno: number): string {
  return c.strerror(errno) as string;
}

/** The errno of the last failed libc call on this thread. */
export function lastErrno(): number {
  return koffi.errno();
}

export function ifNameToIndex(name: string): number {
  const index = c.if_nametoindex(name) as number;
  if (index === 0) throw new NativeError('if_nametoindex', lastErrno(), name);
  return index;
}

export function openPath(path: string, flags = O_RDONLY | O_CLOEXEC): number {
  const fd = c.open(path, flags) as number;
  if (fd < 0) throw new NativeError('open', lastErrno(), path);
  return fd;
}

/**
 * Gives the pages glibc's malloc holds free back to the kernel, in every arena (the main one and
 * those of the worker threads), not only at the top of the main heap as free() does by itself.
 */
export function mallocTrim(): void {
  c.malloc_trim(0);
}

/** A second descriptor of what `fd` refers to, closed on exec; the caller closes it. */
export function dupFd(fd: number): number {
  const copy = c.fcntl(fd, F_DUPFD_CLOEXEC, 'int', 0) as number;
  if (copy < 0) throw new NativeError('fcntl(F_DUPFD_CLOEXEC)', lastErrno(), String(fd));
  return copy;
}

export function closeFd(fd: number): void {
  if ((c.close(fd) as number) < 0) throw new NativeError('close', lastErrno(), String(fd));
}

/**
 * flock(2) on fd. Returns false when `operation` has LOCK_NB and another open file description
 * holds a conflicting lock (EWOULDBLOCK); throws on any other failure.
 */
export function flock(fd: number, operation: number): boolean {
  if ((c.flock(fd, operation) as number) === 0) return true;
  const errno = lastErrno();
  if (errno === EWOULDBLOCK) return false;
  throw new NativeError('flock', errno, String(fd));
}

/** Moves the calling thread into the namespace `fd` refers to (Node runs JS on one thread). */
export function setns(fd: number, nstype: number): void {
  if ((c.setns(fd, nstype) as number) < 0) throw new NativeError('setns', lastErrno());
}

/** mount(2) without flags or options, in the calling process's mount namespace. */
export function mount(source: string, target: string, fstype: string): void {
  if ((c.mount(source, target, fstype, 0, null) as number) < 0)
    throw new NativeError('mount', lastErrno(), `${fstype} on ${target}`);
}

const AF_INET = 2;
const SOCK_DGRAM = 2;
const SOL_SOCKET = 1;
const SO_NETNS_COOKIE = 71;

/** The cookie of the calling thread's network namespace, as bpf_get_netns_cookie reports it for
 * sockets in it (getsockopt SO_NETNS_COOKIE on a throwaway socket: kernel 5.14+). */
export function netnsCookie(): bigint {
  const fd = c.socket(AF_INET, SOCK_DGRAM, 0) as number;
  if (fd < 0) throw new NativeError('socket', lastErrno());
  try {
    const value = Buffer.alloc(8);
    if ((c.getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, value, [8]) as number) < 0)
      throw new NativeError('getsockopt', lastErrno(), 'SO_NETNS_COOKIE');
    return value.readBigUInt64LE(0);
  } finally {
    closeFd(fd);
  }
}

const SOCK_RAW = 3;
const IPPROTO_RAW = 255;

/**
 * A raw IPv4 socket (IPPROTO_RAW: the caller writes the whole IP header, source address included)
 * in the calling thread's network namespace, for the lab's packet generators. Needs CAP_NET_RAW.
 */
export function openRawIPv4Socket(): number {
  const fd = c.socket(AF_INET, SOCK_RAW, IPPROTO_RAW) as number;
  if (fd < 0) throw new NativeError('socket', lastErrno(), 'AF_INET, SOCK_RAW');
  return fd;
}

const AF_NETLINK = 16;
const SOCK_CLOEXEC = 0o2000000;

/** A netlink socket of `protocol` (NETLINK_NETFILTER: 12) in this thread's network namespace. */
export function netlinkSocket(protocol: number): number {
  const fd = c.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol) as number;
  if (fd < 0) throw new NativeError('socket', lastErrno(), `AF_NETLINK, ${protocol}`);
  return fd;
}

/**
 * Sends one netlink request to the kernel and returns its first answer (an ack or error for
 * requests with NLM_F_ACK): one request at a time, so each answer is the last request's.
 */
export function netlinkRequest(fd: number, message: Buffer): Buffer {
  // sockaddr_nl: family, pad, pid 0 (the kernel), groups 0.
  const kernel = Buffer.alloc(12);
  kernel.writeUInt16LE(AF_NETLINK, 0);
  if ((c.sendto(fd, message, message.length, 0, kernel, kernel.length) as number) < 0)
    throw new NativeError('sendto', lastErrno(), 'netlink');
  const answer = Buffer.alloc(8192);
  const n = c.recv(fd, answer, answer.length, 0) as number;
  if (n < 0) throw new NativeError('recv', lastErrno(), 'netlink');
  return answer.subarray(0, n);
}

/** Sends one IPv4 packet (header included) on a raw socket, routed by its destination address. */
export function sendIPv4Packet(fd: number, packet: Buffer): void {
  // struct sockaddr_in: sin_family in host order (little-endian on x86-64 and arm64), the port
  // (unused by raw sockets), then the destination address copied from the IP header.
  const to = Buffer.alloc(16);
  to.writeUInt16LE(AF_INET, 0);
  packet.copy(to, 4, 16, 20);
  if ((c.sendto(fd, packet, packet.length, 0, to, to.length) as number) < 0)
    throw new NativeError('sendto', lastErrno());
}
