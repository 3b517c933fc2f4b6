/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * A service's policy for a new flow, before a backend is chosen: loadBalancerSourceRanges, and
 * the reject and drop actions (policy_family.h, once per family). The tc path and the socket hooks
 * decide alike.
 */
#ifndef KBP_POLICY_H
#define KBP_POLICY_H

#include <linux/types.h>
#include <stdbool.h>

#include <bpf/bpf_helpers.h>

#include "family.h"
#include "maps.h"
#include "parse.h"
#include "verdict.h"

#define KBP_FAM 4
#include "policy_family.h"
#undef KBP_FAM
#define KBP_FAM 6
#include "policy_family.h"
#undef KBP_FAM

#endif /* KBP_POLICY_H */
