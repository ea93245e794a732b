// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Test only: writes a synthetic stall into khagent's cpu_state (the map is
 * reused from the agent's pin), on the CPU the caller runs this on, as the
 * stall detector's timer would after a stall. The host test then checks how
 * the waits that overlap it are split, against times it chose itself.
 */
#include "runq_common.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct inject_args {
	__u64 start;
	__u64 end;
};

SEC("syscall")
int inject_stall(struct inject_args *ctx)
{
	struct cpu_state *cs;
	struct stall *r;
	__u32 zero = 0;

	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	if (!cs)
		return -2;
	r = &cs->stalls[cs->stall_head & (STALL_RING - 1)];
	r->start = ctx->start;
	r->end = ctx->end;
	cs->stall_head++;
	return bpf_get_smp_processor_id();
}
