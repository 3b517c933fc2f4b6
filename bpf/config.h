/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The node configuration (struct kbp_config) as the programs read it: the live generation of
 * kbp_cfg_v2, named by kbp_cfggen_v1. The agent writes the other generation, flips the live one,
 * and writes that generation again only after a grace period, so the pointer returned here stays
 * consistent for the whole run of a program (docs/bpf-control-plane.md, "Publication order").
 */
#ifndef KBP_CONFIG_H
#define KBP_CONFIG_H

#include <linux/types.h>

#include <bpf/bpf_helpers.h>

#include "maps.h"

static __always_inline struct kbp_config *kbp_config_live(void) {
	__u32 zero = 0, gen;
	__u32 *live = bpf_map_lookup_elem(&kbp_cfggen_v1, &zero);

	if (!live)
		return NULL;
	gen = *(volatile __u32 *)live & 1;
	return bpf_map_lookup_elem(&kbp_cfg_v2, &gen);
}

#endif /* KBP_CONFIG_H */
