/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * How much of a wait its cfs_rq spent throttled: the throttled clock of a
 * task's cfs_rq (the kernel's on 6.6+, else the one the fentry programs
 * at the end of runq.bpf.c keep in throttle_start and throttle_clock), read
 * when a wait begins (wait_begins) and when it ends (throttled_part). Kept
 * apart so that the kernel-version fallbacks of the throttle cause sit in
 * one place: everything else calls only those two.
 */
#pragma once

#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#include "runq_common.bpf.h"

/*
 * The fentry-kept throttled clock of cfs_rq at now. A global function: the
 * verifier checks it once, not at every call site with every state (its
 * two lookups doubled the states of sched_switch past the verifier's limit).
 * Scalar arguments only, which 6.1 accepts from tp_btf programs.
 */
__noinline __u64 kh_fentry_throttled_clock(__u64 cfs_rq, __u64 now)
{
	struct kh_throttle_start *start;
	__u64 *acc, t = 0;

	if (!cfs_rq)
		return 0;
	acc = bpf_map_lookup_elem(&throttle_clock, &cfs_rq);
	start = bpf_map_lookup_elem(&throttle_start, &cfs_rq);
	if (acc)
		t = *acc;
	if (start && now > start->ns)
		t += now - start->ns;
	return t;
}

/*
 * The throttled clock of the task's cfs_rq (see kh_throttled_clock): the
 * kernel's on 6.6+, else the one the fentry programs keep (its own
 * throttling only), else none (0).
 */
static __always_inline int throttled_clock(struct task_struct *p, __u64 now, __u64 *clock, __u64 *cfs_rq_addr)
{
	__u64 key;

	if (kh_throttled_clock(p, clock, cfs_rq_addr))
		return 1;
	if (!cfg_fentry_clock || !bpf_core_field_exists(p->se.cfs_rq))
		return 0;
	/* Read as a number (a BTF pointer may not be passed to a global function). */
	key = (__u64)BPF_CORE_READ(p, se.cfs_rq);
	if (!key)
		return 0;
	*clock = kh_fentry_throttled_clock(key, now);
	*cfs_rq_addr = key;
	return 1;
}

/* Records how a wait that begins now stands towards throttling. */
static __always_inline void wait_begins(struct task_state *ts, struct task_struct *p, __u64 now)
{
	ts->wait_start = now;
	ts->thr_cfs_rq = 0;
	ts->throttled = 0;
	if (!cfg_throttle_cause)
		return;
	ts->throttled = kh_task_throttled(p);
	if (!throttled_clock(p, now, &ts->thr_clock, &ts->thr_cfs_rq))
		ts->thr_cfs_rq = 0;
}

/*
 * How much of a wait ending now, on the cfs_rq the task is queued on now,
 * its cfs_rq spent throttled: the throttled clock's advance over the wait,
 * if there is a clock and the task did not change cfs_rq meanwhile;
 * otherwise the wait is throttled as a whole if it began throttled (then
 * throttling that starts or ends within a wait is missed). The fentry clock
 * does not see an ancestor's throttling: a wait that began throttled and
 * saw none on its own cfs_rq falls back to that rule too.
 */
static __always_inline __u64 throttled_part(struct task_state *ts, struct task_struct *p, __u64 now, __u64 wait)
{
	__u64 clock = 0, cfs_rq = 0;

	if (!cfg_throttle_cause)
		return 0;
	if (ts->thr_cfs_rq && throttled_clock(p, now, &clock, &cfs_rq) && cfs_rq == ts->thr_cfs_rq) {
		clock = clock > ts->thr_clock ? clock - ts->thr_clock : 0;
		if (!clock && ts->throttled && cfg_fentry_clock)
			return wait;
		return clock < wait ? clock : wait;
	}
	return ts->throttled ? wait : 0;
}
