// The kernel's numbers the libbpf calls take or return: errno values, and the enums and flags of
// linux/bpf.h, linux/if_link.h (XDP flags), libbpf.h (tc) and linux/btf.h.

export const ENOENT = 2;
export const EEXIST = 17;
export const E2BIG = 7;
export const EINVAL = 22;
export const ENOSPC = 28;
export const ENOTSUPP = 524;

// enum bpf_map_type
export const BPF_MAP_TYPE_ARRAY = 2;
// map update flags
export const BPF_ANY = 0n;
// map_flags
export const BPF_F_INNER_MAP = 1 << 12;
// XDP attach flags
export const XDP_FLAGS_SKB_MODE = 2;
export const XDP_FLAGS_DRV_MODE = 4;
// tc
export const BPF_TC_INGRESS = 1;
export const BPF_TC_EGRESS = 2;
export const BPF_TC_F_REPLACE = 1;
// enum bpf_attach_type values absent from Debian's 6.1 UAPI headers
export const BPF_TCX_INGRESS = 46;
export const BPF_TCX_EGRESS = 47;
export const BPF_XDP = 37;
// BTF kinds
export const BTF_KIND_STRUCT = 4;
export const BTF_KIND_ENUM = 6;
export const BTF_KIND_DATASEC = 15;
// enum bpf_prog_type
export const BPF_PROG_TYPE_SCHED_CLS = 3;
export const BPF_PROG_TYPE_XDP = 6;
export const BPF_PROG_TYPE_CGROUP_SOCK_ADDR = 18;
/** enum bpf_attach_type: the cgroup socket-address hooks (linux/bpf.h). */
export const BPF_CGROUP_INET4_CONNECT = 10;
export const BPF_CGROUP_UDP4_SENDMSG = 14;
export const BPF_CGROUP_UDP4_RECVMSG = 19;
export const BPF_CGROUP_INET4_GETPEERNAME = 29;
export const BPF_CGROUP_INET6_CONNECT = 11;
export const BPF_CGROUP_UDP6_SENDMSG = 15;
export const BPF_CGROUP_UDP6_RECVMSG = 20;
export const BPF_CGROUP_INET6_GETPEERNAME = 30;
export const BPF_FUNC_SET_RETVAL = 187;
/** bpf_redirect_neigh and bpf_redirect_peer (5.10+): host routing (bpf.hostRouting) needs both. */
export const BPF_FUNC_REDIRECT_NEIGH = 152;
export const BPF_FUNC_REDIRECT_PEER = 155;
/** bpf_loop (5.17+): bpf/lb.o needs it, bpf/lb_compat.o does not. */
export const BPF_FUNC_LOOP = 181;
