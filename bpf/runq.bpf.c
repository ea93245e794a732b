// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Per-cgroup run-queue latency, its cause, and who held the CPU meanwhile.
 *
 * A wait starts when a task is woken (sched_wakeup, sched_wakeup_new) or is
 * switched out while still runnable (preempted, or throttled), and ends when
 * it is switched in. The wait is charged to the cgroup v2 of the task that
 * waited, split by cause: its own cfs_rq was throttled, a task of the same
 * cgroup ran, or another cgroup ran (interference, recorded per pair). Who
 * ran is read from a small per-CPU ring of the slices that ended recently.
 *
 * One object and one skeleton, split by concern into headers that this file
 * includes below, in this order (the order of the code in the object):
 *   runq_common.bpf.h    constants, load-time settings, structs, all maps
 *   runq_slots.bpf.h     slots of the shared counters, moved bitmaps, each
 *                        CPU's pending batch (and why they are so)
 *   runq_throttle.bpf.h  the throttled clock: how much of a wait was throttled
 *   runq_stall.bpf.h     the stall detector: time a CPU ran nothing at all
 *   runq_wait.bpf.h      the wait bookkeeping and the blame ring
 *   runq_reclaim.bpf.h   who paid for memory reclaim (direct reclaim time)
 * (core_fixes.bpf.h, the CO-RE helpers for kernel layout differences, comes
 * first.) This file holds the programs: the scheduler tracepoints, the
 * iterator that reports waits still going on, cgroup removal, and the fentry
 * programs that see throttling, with their helpers.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#include "khagent/abi/runq.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#include "runq_common.bpf.h"
#include "runq_slots.bpf.h"
#include "runq_throttle.bpf.h"
#include "runq_stall.bpf.h"
#include "runq_wait.bpf.h"
#include "runq_reclaim.bpf.h"

SEC("tp_btf/sched_wakeup")
int BPF_PROG(handle_sched_wakeup, struct task_struct *p)
{
	__u64 now = bpf_ktime_get_ns(); /* first: the wait starts here */

	count(KH_CNT_WAKEUPS);
	start_wait(p, now);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(handle_sched_wakeup_new, struct task_struct *p)
{
	__u64 now = bpf_ktime_get_ns(); /* first: the wait starts here */

	count(KH_CNT_WAKEUPS);
	start_wait(p, now);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(handle_sched_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	__u64 now = bpf_ktime_get_ns(), cgid, t0;
	struct pending *pd;
	struct task_state *ts;
	struct cpu_state *cs;
	__u32 zero = 0;
	__u64 thr;

	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	if (!cs)
		return 0;
	cs->switches++; /* added to counters with the pending counts */

	/* prev leaves the CPU: charge its slice, start a wait if still runnable. */
	if (prev->pid) {
		/*
		 * A preempted task stays queued whatever its state: one preempted
		 * on its way to sleep (state set, schedule() not reached yet) is
		 * not dequeued (__schedule() dequeues only on a voluntary switch)
		 * and must run again, if only to go to sleep. Its wait starts now;
		 * if its event comes first, the wakeup restarts it (start_wait()).
		 * The kernel's schedstat starts a run_delay only if
		 * task_is_running(prev), so in that rare case khagent counts a
		 * wait schedstat does not (as it already did when such a task
		 * was woken before it ran again).
		 * RunqHost.WaitsMatchKernelAndTracerAndBlameTheHog checks the
		 * counts still agree with schedstat within 2%.
		 */
		bool running = kh_task_state(prev) == TASK_RUNNING;
		bool runnable = preempt || running;

		cgid = cs->cur_cgid;
		if (!cgid)
			cgid = task_cgid(prev);
		pd = pending_of(cs, cgid, now);
		if (cs->cur_start)
			pd->cpu_ns += now - cs->cur_start;
		if (runnable)
			pd->preemptions++;
		/*
		 * A sleeping prev has no wait to clear: its last one ended when it
		 * was switched in, and start_wait() starts none while it runs.
		 */
		if (runnable) {
			ts = bpf_task_storage_get(&task_state, prev, 0,
						  BPF_LOCAL_STORAGE_GET_F_CREATE);
			if (ts) {
				wait_begins(ts, prev, now);
				ts->sleeping = !running;
			} else {
				count(KH_CNT_STORAGE_MISS);
			}
		}
		if (cs->cur_start) {
			struct slice *sl = &cs->ring[cs->head & (SLICE_RING - 1)];

			sl->cgid = cgid;
			sl->start = cs->cur_start;
			sl->end = now;
			cs->head++;
		}
	}

	/* next arrives: end its wait. */
	cs->cur_start = now;
	cs->cur_cgid = 0;
	if (!next->pid) {
		/* Going idle, maybe for long: publish what this CPU gathered. */
		flush_cpu(cs, now);
		return 0;
	}
	cgid = task_cgid(next);
	cs->cur_cgid = cgid;
	if (cfg_stall_period_ns && stall_enabled && cs->stall_state == KH_STALL_IDLE)
		stall_arm(cs, now);
	ts = bpf_task_storage_get(&task_state, next, 0, 0);
	if (ts && ts->wait_start) {
		t0 = ts->wait_start;
		ts->wait_start = 0;
		if (now > t0) {
			thr = throttled_part(ts, next, now, now - t0);
			end_wait(cs, pending_of(cs, cgid, now), cgid, t0, now, thr, ts);
		}
	}
	/* Bound how late cgroup_stats shows what this CPU gathered. */
	if (now - cs->pd.since >= cfg_pending_ns)
		flush_cpu(cs, now);
	return 0;
}

/*
 * A queued task moves to another CPU (load balancing, an affinity change):
 * charge the part of its wait since it was queued on the source CPU to who
 * ran there (that CPU's ring and the task on it now), and keep the sums in
 * its task_state for end_wait, which walks only the ring of the CPU where
 * the wait ends. The source's rq lock is held, so its ring does not change
 * meanwhile. Waits that began throttled are left to the end-of-wait rule.
 */
SEC("tp_btf/sched_migrate_task")
int BPF_PROG(handle_sched_migrate_task, struct task_struct *p, int dest_cpu)
{
	__u64 now, w0, cgid;
	struct blame b = {};
	struct task_state *ts;
	struct cpu_state *cs;
	__u32 zero = 0, src;

	ts = bpf_task_storage_get(&task_state, p, 0, 0);
	if (!ts || !ts->wait_start || ts->throttled)
		return 0;
	src = kh_task_cpu(p);
	if (src == (__u32)dest_cpu)
		return 0;
	cs = bpf_map_lookup_percpu_elem(&cpu_state, &zero, src);
	if (!cs)
		return 0;
	now = bpf_ktime_get_ns();
	w0 = ts->wait_start;
	if (ts->seg_start > w0) {
		w0 = ts->seg_start;
		b.stolen = ts->acc_stolen;
		b.same = ts->acc_same;
		b.other = ts->acc_other;
		if (ts->acc_top)
			blame_add(&b, ts->acc_top, ts->acc_top_ns);
	}
	if (now <= w0)
		return 0;
	cgid = task_cgid(p);
	/* The task on the source CPU now: its slice is not in the ring yet. */
	if (cs->cur_cgid && cs->cur_start < now) {
		__u64 from = cs->cur_start > w0 ? cs->cur_start : w0, ov = now - from;
		__u64 lost = stall_overlap(cs, from, now), going = stall_ongoing(cs, src, from, now);

		/*
		 * Stalls the ring has are in b.stolen by blame_ring below; one
		 * going on now (idle balance pulls from a stalled CPU) is not in
		 * the ring yet. Neither is the current task's.
		 */
		ov = ov > lost ? ov - lost : 0;
		if (going > ov)
			going = ov;
		b.stolen += going;
		ov -= going;

		if (cs->cur_cgid == cgid) {
			b.same += ov;
		} else {
			b.other += ov;
			if (cfg_interference) {
				b.agg = cs->cur_cgid;
				b.agg_ns = ov;
			}
		}
	}
	blame_ring(cs, cs->head, cgid, w0, now, &b);
	ts->acc_stolen = b.stolen;
	ts->acc_same = b.same;
	ts->acc_other = b.other;
	ts->acc_top = blame_top(&b, &ts->acc_top_ns);
	ts->seg_start = now;
	return 0;
}

/*
 * Sets up CPU ctx->cpu's stall timer (runq_stall.bpf.h); the loader runs it
 * once per possible CPU after the load (BPF_PROG_TEST_RUN). It does not
 * start the timer: sched_switch does, on the CPU the timer is pinned to.
 * Returns 0, or the negative errno of the helper that refused.
 */
struct stall_init_args {
	__u32 cpu;
};

SEC("syscall")
int init_stall_timer(struct stall_init_args *ctx)
{
	struct stall_timer *st;
	__u32 cpu = ctx->cpu;
	long err;

	st = bpf_map_lookup_elem(&stall_timers, &cpu);
	if (!st)
		return -2; /* ENOENT */
	err = bpf_timer_init(&st->timer, &stall_timers, 1 /* CLOCK_MONOTONIC */);
	if (err && err != -16 /* EBUSY: set up already */)
		return err;
	return bpf_timer_set_callback(&st->timer, stall_tick);
}

/*
 * Direct reclaim, by the task that does it. The memcg pair exists with
 * CONFIG_MEMCG only: the loader leaves those two out on kernels without it.
 */
SEC("tp_btf/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(handle_direct_reclaim_begin, int order, gfp_t gfp_flags)
{
	reclaim_begins(KH_RECLAIM_NODE, order);
	return 0;
}

SEC("tp_btf/mm_vmscan_direct_reclaim_end")
int BPF_PROG(handle_direct_reclaim_end, unsigned long nr_reclaimed)
{
	reclaim_ends(KH_RECLAIM_NODE, nr_reclaimed);
	return 0;
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(handle_memcg_reclaim_begin, int order, gfp_t gfp_flags)
{
	reclaim_begins(KH_RECLAIM_MEMCG, order);
	return 0;
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(handle_memcg_reclaim_end, unsigned long nr_reclaimed)
{
	reclaim_ends(KH_RECLAIM_MEMCG, nr_reclaimed);
	return 0;
}

/*
 * The fast path for waits still going on. sched_switch reports a wait when
 * it ends, so a task starved for long (behind a SCHED_FIFO hog, a long
 * throttle, a CPU stuck in the kernel) would be reported late, or never
 * while it lasts. Userspace runs this iterator over every task now and then:
 * a task of a protected cgroup that has waited past its threshold, and was
 * not reported in this wait yet, gets an event now. The aggressor is
 * whoever holds the task's CPU now (this CPU's cpu_state as the switches
 * left it), blamed for the time since it was switched in, or since the
 * wait began if later, less the time that CPU stalled meanwhile; mostly
 * stalled, the cause is stolen, with no aggressor. A wait that began
 * throttled is reported as throttled, with no aggressor.
 */
SEC("iter/task")
int scan_waits(struct bpf_iter__task *ctx)
{
	struct task_struct *p = ctx->task;
	struct kh_wait_event *e;
	struct task_state *ts;
	struct kh_protect *pr;
	struct cpu_state *cs;
	__u64 now, t0, cgid, agg = 0, agg_ns = 0;
	__u32 zero = 0, cpu, cause;

	if (!p)
		return 0;
	/* Most tasks are not protected: the cheapest test first. */
	cgid = task_cgid(p);
	pr = bpf_map_lookup_elem(&protected_cgroups, &cgid);
	if (!pr)
		return 0;
	ts = bpf_task_storage_get(&task_state, p, 0, 0);
	if (!ts)
		return 0;
	t0 = ts->wait_start;
	if (!t0 || ts->reported == t0)
		return 0;
	now = bpf_ktime_get_ns();
	if (now <= t0 || now - t0 < cfg_event_min_ns)
		return 0;
	if (now - t0 < pr->threshold_ns || now - pr->last_event_ns < cfg_event_interval_ns)
		return 0;
	cpu = kh_task_cpu(p);
	cause = KH_WAIT_UNATTRIBUTED;
	if (ts->throttled) {
		cause = KH_WAIT_THROTTLED;
	} else {
		cs = bpf_map_lookup_percpu_elem(&cpu_state, &zero, cpu);
		if (cs && cs->cur_cgid) {
			__u64 from = cs->cur_start > t0 ? cs->cur_start : t0, stolen;

			agg = cs->cur_cgid;
			agg_ns = now - from;
			if (agg_ns > now - t0)
				agg_ns = 0; /* clock skew between CPUs */
			/* Its CPU stalled meanwhile (or stalls now): not the holder's doing. */
			stolen = stall_overlap(cs, from, now) + stall_ongoing(cs, cpu, from, now);
			if (stolen > agg_ns)
				stolen = agg_ns;
			agg_ns -= stolen;
			cause = agg == cgid ? KH_WAIT_SAME_CGROUP : KH_WAIT_OTHER_CGROUP;
			/* Stolen only if the stalls are most of the whole wait so far. */
			if (2 * stolen > now - t0)
				cause = KH_WAIT_STOLEN;
			if (agg == cgid || cause == KH_WAIT_STOLEN) {
				agg = 0;
				agg_ns = 0;
			}
		}
	}
	ts->reported = t0;
	pr->last_event_ns = now;
	e = bpf_ringbuf_reserve(&wait_events, sizeof(*e), 0);
	if (!e) {
		count(KH_CNT_EVENTS_DROPPED);
		return 0;
	}
	e->ts_ns = now;
	e->cgroup_id = cgid;
	e->wait_ns = now - t0;
	e->aggressor_id = agg;
	e->aggressor_ns = agg_ns;
	e->cause = cause;
	e->cpu = cpu;
	e->flags = KH_EVENT_ONGOING;
	bpf_ringbuf_submit(e, 0);
	count(KH_CNT_EVENTS);
	return 0;
}

/*
 * A cgroup was removed. Only default-hierarchy (v2) cgroups have ids here:
 * v1 hierarchies (hierarchy_id 1 and up on hybrid hosts) are skipped, and so
 * are cgroups that never had counts. A full queue is counted; the userspace
 * side then falls back to checking idle cgroups itself.
 */
SEC("tp_btf/cgroup_rmdir")
int BPF_PROG(handle_cgroup_rmdir, struct cgroup *cgrp, const char *path)
{
	__u64 id;

	if (cgrp->root->hierarchy_id != 0)
		return 0;
	id = cgrp->kn->id;
	if (!bpf_map_lookup_elem(&cgroup_slots, &id))
		return 0;
	if (bpf_map_push_elem(&removed_cgroups, &id, 0))
		count(KH_CNT_REMOVALS_LOST);
	return 0;
}

/*
 * Throttling seen directly, where the kernel lets fentry attach (the loader
 * probes first and disables these otherwise; cpu.stat then feeds the metric).
 */
static __always_inline __u64 cfs_rq_cgid(struct cfs_rq *cfs_rq)
{
	return BPF_CORE_READ(cfs_rq, tg, css.cgroup, kn, id);
}

/*
 * Whether the cfs_rq's cgroup is on the default (v2) hierarchy, number 0.
 * On a hybrid host the cpu controller is on a v1 hierarchy, whose cgroup
 * ids collide with the v2 ids that key every map: no throttle_stats entry
 * then (the loader reads cpu.stat instead).
 */
static __always_inline bool cfs_rq_on_v2(struct cfs_rq *cfs_rq)
{
	return BPF_CORE_READ(cfs_rq, tg, css.cgroup, root, hierarchy_id) == 0;
}

/* The group's count of throttled periods (an int in the kernel), as __u32. */
static __always_inline __u32 cfs_rq_nr_throttled(struct cfs_rq *cfs_rq)
{
	return (__u32)BPF_CORE_READ(cfs_rq, tg, cfs_bandwidth.nr_throttled);
}

SEC("fentry/throttle_cfs_rq")
int BPF_PROG(handle_throttle_cfs_rq, struct cfs_rq *cfs_rq)
{
	__u64 key = (__u64)cfs_rq;
	struct kh_throttle_start st = {
		.ns = bpf_ktime_get_ns(),
		.nr_throttled = cfs_rq_nr_throttled(cfs_rq),
	};

	bpf_map_update_elem(&throttle_start, &key, &st, BPF_ANY);
	return 0;
}

/*
 * Counts the periods the kernel counted (cfs_bandwidth.nr_throttled, what
 * cpu.stat shows) since the group's last unthrottle seen here: its period
 * timer counts a throttled period before it hands out the new quota, so the
 * rise is there when any CPU's cfs_rq unthrottles, and only the first of
 * them wins the exchange. A new entry starts from the count when this
 * cfs_rq was throttled. Counting unthrottles instead gave one per CPU.
 */
static __always_inline void count_periods(struct kh_throttle_stats *v, __u32 nr)
{
	__u64 seen = v->nr_throttled;
	/* Modulo 2^32: the kernel's int wraps; a count behind the one seen
	 * (a CPU that read it before another's exchange) is no rise. */
	__u32 rise = nr - (__u32)seen;

	if (rise && rise < (1u << 31) && __sync_val_compare_and_swap(&v->nr_throttled, seen, (__u64)nr) == seen)
		kh_add(&v->events, rise);
}

SEC("fentry/unthrottle_cfs_rq")
int BPF_PROG(handle_unthrottle_cfs_rq, struct cfs_rq *cfs_rq)
{
	__u64 key = (__u64)cfs_rq, now = bpf_ktime_get_ns(), cgid;
	struct kh_throttle_stats *v = NULL, init = {};
	struct kh_throttle_start *start;
	bool v2;

	start = bpf_map_lookup_elem(&throttle_start, &key);
	if (!start)
		return 0;
	cgid = cfs_rq_cgid(cfs_rq);
	v2 = cfs_rq_on_v2(cfs_rq);
	if (v2)
		v = bpf_map_lookup_elem(&throttle_stats, &cgid);
	if (!v && v2) {
		/* EEXIST from a racing CPU is fine: the lookup finds its entry. */
		init.nr_throttled = start->nr_throttled;
		bpf_map_update_elem(&throttle_stats, &cgid, &init, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&throttle_stats, &cgid);
	}
	if (v) {
		/* Each CPU's cfs_rq of the cgroup unthrottles on its own: atomic. */
		count_periods(v, cfs_rq_nr_throttled(cfs_rq));
		if (now > start->ns)
			kh_add(&v->throttled_ns, now - start->ns);
	}
	if (cfg_fentry_clock && now > start->ns) {
		/* Only this CPU (holding its rq lock) touches this cfs_rq's entry. */
		__u64 d = now - start->ns, *acc = bpf_map_lookup_elem(&throttle_clock, &key);

		if (acc)
			*acc += d;
		else
			bpf_map_update_elem(&throttle_clock, &key, &d, BPF_ANY);
	}
	bpf_map_delete_elem(&throttle_start, &key);
	return 0;
}
