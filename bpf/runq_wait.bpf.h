/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The wait bookkeeping: a wait starts (start_wait), is charged when it ends
 * (end_wait) to the pending counts of its cgroup, split by cause, and the
 * cgroups that held the CPU meanwhile are found in the CPU's ring of recent
 * slices (blame_ring, struct blame: the "blame ring"). A long wait of a
 * protected cgroup is reported at once (report_wait). The same ring walk
 * charges the part of a wait before a task moved CPUs (sched_migrate_task).
 */
#pragma once

#include "core_fixes.bpf.h"
#include "runq_common.bpf.h"
#include "runq_slots.bpf.h"
#include "runq_throttle.bpf.h"
#include "runq_stall.bpf.h"

static __always_inline void start_wait(struct task_struct *p, __u64 now)
{
	struct task_state *ts;

	/*
	 * A task woken while it still runs (between set_current_state() and
	 * schedule(), the kernel's ttwu_runnable()) does not wait: it goes on
	 * running. If it is switched out still runnable, sched_switch starts
	 * its wait. This check is what lets sched_switch leave a sleeping
	 * prev's task storage alone: no wait start can be left behind on a
	 * running task.
	 */
	if (kh_task_on_cpu(p))
		return;
	ts = bpf_task_storage_get(&task_state, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!ts) {
		count(KH_CNT_STORAGE_MISS);
		return;
	}
	/*
	 * Already queued (preempted, then woken again): keep the earlier start,
	 * unless it was preempted on its way to sleep. Until this wakeup it
	 * was waiting for its event, not for a CPU (it would have been asleep
	 * had it not been preempted): its wait starts now, as any sleeper's.
	 */
	if (ts->wait_start && !ts->sleeping)
		return;
	ts->sleeping = 0;
	wait_begins(ts, p, now);
}

/* Fast path: tell userspace at once about a long wait of a protected cgroup. */
static __always_inline void report_wait(__u64 cgid, __u64 wait, __u64 now, __u64 agg,
					__u64 agg_ns, __u32 cause)
{
	struct kh_protect *pr;
	struct kh_wait_event *e;

	if (wait < cfg_event_min_ns)
		return;
	pr = bpf_map_lookup_elem(&protected_cgroups, &cgid);
	if (!pr || wait < pr->threshold_ns || now - pr->last_event_ns < cfg_event_interval_ns)
		return;
	pr->last_event_ns = now;
	e = bpf_ringbuf_reserve(&wait_events, sizeof(*e), 0);
	if (!e) {
		count(KH_CNT_EVENTS_DROPPED);
		return;
	}
	e->ts_ns = now;
	e->cgroup_id = cgid;
	e->wait_ns = wait;
	e->aggressor_id = agg;
	e->aggressor_ns = agg_ns;
	e->cause = cause;
	e->cpu = bpf_get_smp_processor_id();
	e->flags = 0;
	bpf_ringbuf_submit(e, 0);
	count(KH_CNT_EVENTS);
}

/*
 * Who held a CPU while a task of cgroup cgid waited there. The event's
 * aggressor is the cgroup that held it longest in total: runs of one
 * cgroup are summed in a small table (the first BLAME_TOP cgroups met;
 * later ones still go to the pairs and to "other", not to the aggressor).
 */
#define BLAME_TOP 4
struct blame {
	__u64 stolen; /* ns the CPU stalled (no one ran: runq_stall.bpf.h) */
	__u64 same;   /* ns a task of its own cgroup ran */
	__u64 other;  /* ns other cgroups ran (charged to the interference pairs) */
	__u64 agg;    /* the cgroup of the run being summed, and its ns */
	__u64 agg_ns;
	__u64 ids[BLAME_TOP]; /* the cgroups met, 0 = free, and their totals */
	__u64 ns[BLAME_TOP];
};

/*
 * A global function: the verifier checks it once, not at every slice of
 * every ring walk it is called from (inlined, it made handle_sched_switch
 * 3.5x costlier to verify).
 */
__noinline int blame_add(struct blame *b, __u64 id, __u64 ns)
{
	int k;

	if (!b)
		return 0;
	for (k = 0; k < BLAME_TOP; k++) {
		if (b->ids[k] == id || !b->ids[k]) {
			b->ids[k] = id;
			b->ns[k] += ns;
			return 1;
		}
	}
	return 0;
}

/* The cgroup with the most ns in b's table (0 if none), and its ns. */
static __always_inline __u64 blame_top(const struct blame *b, __u64 *ns)
{
	__u64 top = 0, top_ns = 0;
	int k;

	for (k = 0; k < BLAME_TOP; k++) {
		if (b->ids[k] && b->ns[k] > top_ns) {
			top = b->ids[k];
			top_ns = b->ns[k];
		}
	}
	*ns = top_ns;
	return top;
}

static __always_inline void blame_run_ends(struct blame *b, __u64 victim)
{
	if (!b->agg_ns)
		return;
	pair_add(victim, b->agg, b->agg_ns);
	blame_add(b, b->agg, b->agg_ns);
	b->agg_ns = 0;
}

/*
 * Adds to b the slices of cs's ring (head: slices pushed so far) that
 * overlap [w0, w1], newest first, runs of one cgroup summed before they go
 * to the pairs. The CPU's stalls in the window are added to b->stolen and
 * taken out of the slices they fell in: whoever was current then did not
 * run either. Returns how many slices it looked at (SLICE_RING: the ring
 * may not reach back to w0).
 */
static __always_inline int blame_ring(struct cpu_state *cs, __u64 head, __u64 victim, __u64 w0, __u64 w1,
				      struct blame *b)
{
	bool stalled = stalled_since(cs, w0);
	int i;

	if (stalled)
		b->stolen += stall_overlap(cs, w0, w1);
	for (i = 0; i < SLICE_RING; i++) {
		struct slice *sl = &cs->ring[(head - 1 - i) & (SLICE_RING - 1)];
		__u64 from, to, ov;

		if (i >= head || sl->end <= w0)
			break;
		from = sl->start > w0 ? sl->start : w0;
		to = sl->end < w1 ? sl->end : w1;
		ov = to > from ? to - from : 0;
		if (stalled && ov) {
			__u64 lost = stall_overlap(cs, from, to);

			ov = ov > lost ? ov - lost : 0;
		}
		if (sl->cgid == victim) {
			b->same += ov;
			continue;
		}
		b->other += ov;
		if (!cfg_interference)
			continue;
		if (sl->cgid != b->agg) {
			blame_run_ends(b, victim);
			b->agg = sl->cgid;
			b->agg_ns = 0;
		}
		b->agg_ns += ov;
	}
	blame_run_ends(b, victim);
	return i;
}

/*
 * Charge a wait [t0, now] of a task of cgroup cgid that now runs on this
 * CPU, to this CPU's pending counts of that cgroup (pd, only this CPU
 * writes them: plain adds). thr ns of it its cfs_rq spent throttled: they
 * are taken to be the start of the wait if it began throttled, its end
 * otherwise, and who ran meanwhile is not blamed for them; the rest is
 * split by who ran on this CPU.
 */
static __always_inline void end_wait(struct cpu_state *cs, struct pending *pd, __u64 cgid, __u64 t0,
				     __u64 now, __u64 thr, struct task_state *ts)
{
	__u64 wait = now - t0, rest, same, other, stolen;
	__u64 w0 = t0, w1 = now, span, seg = ts->seg_start;
	struct blame bl = {};
	__u32 began_throttled = ts->throttled;
	__u32 b, cause;
	int i;

	b = kh_hist_bucket(wait);
	if (b >= KH_HIST_BUCKETS)
		b = KH_HIST_BUCKETS - 1;
	pending_hist(pd, b);
	pd->wait_ns += wait;
	pd->waits++;

	if (thr >= wait) {
		pd->cause_ns[KH_WAIT_THROTTLED] += wait;
		report_wait(cgid, wait, now, 0, 0, KH_WAIT_THROTTLED);
		return;
	}
	pd->cause_ns[KH_WAIT_THROTTLED] += thr;
	if (began_throttled)
		w0 += thr;
	else
		w1 -= thr;
	span = w1 - w0;
	/*
	 * It moved CPUs while queued: what came before the last move was
	 * charged where it was queued then; this CPU's ring covers the rest.
	 */
	if (seg > t0) {
		bl.stolen = ts->acc_stolen;
		bl.same = ts->acc_same;
		bl.other = ts->acc_other;
		if (ts->acc_top)
			blame_add(&bl, ts->acc_top, ts->acc_top_ns);
		w0 = seg < w1 ? (seg > w0 ? seg : w0) : w1;
	}

	/* The slices that ended during the window, newest first. */
	i = blame_ring(cs, cs->head, cgid, w0, w1, &bl);
	same = bl.same;
	other = bl.other;
	/* The ring's oldest slice began inside the window: older ones are lost. */
	if (i == SLICE_RING && cs->ring[cs->head & (SLICE_RING - 1)].start > w0)
		count(KH_CNT_RING_OVERFLOW);

	if (same > span) /* clock skew between CPUs */
		same = span;
	if (same + other > span)
		other = span - same;
	stolen = bl.stolen;
	if (same + other + stolen > span)
		stolen = span - same - other;
	rest = span - same - other - stolen;
	pd->cause_ns[KH_WAIT_SAME_CGROUP] += same;
	pd->cause_ns[KH_WAIT_OTHER_CGROUP] += other;
	pd->cause_ns[KH_WAIT_STOLEN] += stolen;
	pd->cause_ns[KH_WAIT_UNATTRIBUTED] += rest;
	if (wait >= cfg_event_min_ns) {
		__u64 top_ns, top = blame_top(&bl, &top_ns);

		cause = other >= same ? (other >= rest ? KH_WAIT_OTHER_CGROUP : KH_WAIT_UNATTRIBUTED)
				      : KH_WAIT_SAME_CGROUP;
		if (stolen >= other && stolen >= same && stolen >= rest)
			cause = KH_WAIT_STOLEN;
		if (thr >= other && thr >= same && thr >= rest && thr >= stolen)
			cause = KH_WAIT_THROTTLED;
		if (cause == KH_WAIT_THROTTLED || cause == KH_WAIT_STOLEN) {
			top = 0;
			top_ns = 0;
		}
		report_wait(cgid, wait, now, top, top_ns, cause);
	}
}
