// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Per-cgroup run-queue latency, its cause, and who held the CPU meanwhile.
 *
 * A wait starts when a task is woken (sched_wakeup, sched_wakeup_new) or is
 * switched out while still runnable (preempted, or throttled), and ends when
 * it is switched in. The wait is charged to the cgroup v2 of the task that
 * waited, split by cause: its own cfs_rq was throttled, a task of the same
 * cgroup ran, or another cgroup ran (interference, recorded per pair). Who
 * ran is read from a small per-CPU ring of the slices that ended recently.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#include "khagent/abi/runq.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define TASK_RUNNING 0
#define SLICE_RING 16 /* power of two */

/* Record interference pairs (victim, aggressor); off saves map updates. */
const volatile bool cfg_interference = true;
/* Use the cfs_rq throttle state to tell throttle-caused waits apart. */
const volatile bool cfg_throttle_cause = true;

/* Fast path: waits shorter than this never look up the protected map. */
const volatile __u64 cfg_event_min_ns = ~0ULL;
/* Fast path: at most one event per protected cgroup per this interval. */
const volatile __u64 cfg_event_interval_ns = 50000000;

/* A zeroed stats value to create map entries from (too big for the stack). */
const struct kh_cgroup_stats kh_zero_stats = {};

/* A run of one task on a CPU: who ran (cgroup v2 id) and when. */
struct slice {
	__u64 cgid;
	__u64 start;
	__u64 end;
};

struct cpu_state {
	__u64 cur_cgid;   /* cgroup v2 id of the task on this CPU; 0 = idle */
	__u64 cur_start;  /* when it was switched in; 0 = unknown */
	__u64 head;       /* slices pushed so far; ring[(head - 1) % RING] is newest */
	struct slice ring[SLICE_RING];
};

struct task_state {
	__u64 wait_start; /* ns when the current wait began; 0 = not waiting */
	__u32 throttled;  /* the wait began on a throttled cfs_rq */
	__u32 pad;
};

/* key: cgroup v2 id; value: that cgroup's counters on this CPU */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct kh_cgroup_stats);
} cgroup_stats SEC(".maps");

/* key: (victim, aggressor) cgroup ids; value: victim wait while aggressor ran */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct kh_pair);
	__type(value, struct kh_pair_stats);
} interference SEC(".maps");

/* key: cgroup v2 id; value: throttle events and time (fentry source only) */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct kh_throttle_stats);
} throttle_stats SEC(".maps");

/* key: struct cfs_rq address; value: ns when it was throttled */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} throttle_start SEC(".maps");

/* key: 0; value: this CPU's running slice and ring of recent slices */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpu_state SEC(".maps");

/* key: enum kh_counter; value: how often it happened on this CPU */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KH_NR_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* key: cgroup v2 id of a protected (online) cgroup; value: its wait threshold */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct kh_protect);
} protected_cgroups SEC(".maps");

/* over-threshold waits of protected cgroups (struct kh_wait_event) */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} wait_events SEC(".maps");

/* task -> its current wait */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_state);
} task_state SEC(".maps");

static __always_inline void count(__u32 c)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &c);

	if (v)
		(*v)++;
}

/*
 * The cgroup v2 id of a task: the kernfs id of its default-hierarchy cgroup.
 * Walked directly through BTF pointers (tp_btf arguments are trusted): the
 * verifier turns each load into a fault-safe one, with no helper calls, which
 * matters on sched_switch. CO-RE relocates every field offset.
 */
static __always_inline __u64 task_cgid(struct task_struct *p)
{
	return p->cgroups->dfl_cgrp->kn->id;
}

static __always_inline struct kh_cgroup_stats *stats_of(__u64 cgid)
{
	struct kh_cgroup_stats *st = bpf_map_lookup_elem(&cgroup_stats, &cgid);

	if (st)
		return st;
	bpf_map_update_elem(&cgroup_stats, &cgid, &kh_zero_stats, BPF_NOEXIST);
	st = bpf_map_lookup_elem(&cgroup_stats, &cgid);
	if (!st)
		count(KH_CNT_STATS_FULL);
	return st;
}

static __always_inline void pair_add(__u64 victim, __u64 aggressor, __u64 ns)
{
	struct kh_pair key = { .victim = victim, .aggressor = aggressor };
	struct kh_pair_stats *v, init = { .wait_ns = ns, .count = 1 };

	v = bpf_map_lookup_elem(&interference, &key);
	if (v) {
		v->wait_ns += ns;
		v->count++;
		return;
	}
	if (bpf_map_update_elem(&interference, &key, &init, BPF_NOEXIST))
		count(KH_CNT_PAIRS_FULL);
}

static __always_inline void start_wait(struct task_struct *p, __u64 now)
{
	struct task_state *ts;

	ts = bpf_task_storage_get(&task_state, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!ts) {
		count(KH_CNT_STORAGE_MISS);
		return;
	}
	/* Already queued (preempted, then woken again): keep the earlier start. */
	if (ts->wait_start)
		return;
	ts->wait_start = now;
	ts->throttled = cfg_throttle_cause ? kh_task_throttled(p) : 0;
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
	bpf_ringbuf_submit(e, 0);
	count(KH_CNT_EVENTS);
}

/* Charge a wait [t0, now] of a task of cgroup cgid that now runs on this CPU. */
static __always_inline void end_wait(struct cpu_state *cs, __u64 cgid, __u64 t0,
				     __u64 now, __u32 throttled)
{
	struct kh_cgroup_stats *st;
	__u64 wait = now - t0, same = 0, other = 0, agg = 0, agg_ns = 0, top = 0, top_ns = 0;
	__u32 b;
	int i;

	st = stats_of(cgid);
	if (!st)
		return;
	st->wait_ns += wait;
	st->waits++;
	b = kh_hist_bucket(wait);
	if (b >= KH_HIST_BUCKETS)
		b = KH_HIST_BUCKETS - 1;
	st->hist[b]++;

	if (throttled) {
		st->cause_ns[KH_WAIT_THROTTLED] += wait;
		report_wait(cgid, wait, now, 0, 0, KH_WAIT_THROTTLED);
		return;
	}

	/* Walk the slices that ended during the wait, newest first. */
	for (i = 0; i < SLICE_RING; i++) {
		struct slice *sl = &cs->ring[(cs->head - 1 - i) & (SLICE_RING - 1)];
		__u64 from, ov;

		if (i >= cs->head || sl->end <= t0)
			break;
		from = sl->start > t0 ? sl->start : t0;
		ov = sl->end > from ? sl->end - from : 0;
		if (sl->cgid == cgid) {
			same += ov;
			continue;
		}
		other += ov;
		if (!cfg_interference)
			continue;
		if (sl->cgid != agg) {
			if (agg_ns)
				pair_add(cgid, agg, agg_ns);
			agg = sl->cgid;
			agg_ns = 0;
		}
		agg_ns += ov;
		if (agg_ns > top_ns) {
			top = agg;
			top_ns = agg_ns;
		}
		if (i == SLICE_RING - 1 && sl->start > t0)
			count(KH_CNT_RING_OVERFLOW);
	}
	if (agg_ns)
		pair_add(cgid, agg, agg_ns);

	if (same + other > wait) /* clock skew between CPUs */
		other = wait > same ? wait - same : 0;
	st->cause_ns[KH_WAIT_SAME_CGROUP] += same;
	st->cause_ns[KH_WAIT_OTHER_CGROUP] += other;
	st->cause_ns[KH_WAIT_UNATTRIBUTED] += wait - same - other;
	if (wait >= cfg_event_min_ns)
		report_wait(cgid, wait, now, top, top_ns,
			    other >= same ? (other >= wait - same - other ? KH_WAIT_OTHER_CGROUP
									  : KH_WAIT_UNATTRIBUTED)
					  : KH_WAIT_SAME_CGROUP);
}

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
	__u64 now = bpf_ktime_get_ns(), cgid;
	struct task_state *ts;
	struct cpu_state *cs;
	__u32 zero = 0;

	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	if (!cs)
		return 0;
	count(KH_CNT_SWITCHES);

	/* prev leaves the CPU: charge its slice, start a wait if still runnable. */
	if (prev->pid) {
		bool runnable = kh_task_state(prev) == TASK_RUNNING;
		struct kh_cgroup_stats *st;

		cgid = cs->cur_cgid;
		if (!cgid)
			cgid = task_cgid(prev);
		st = stats_of(cgid);
		if (st) {
			if (cs->cur_start)
				st->cpu_ns += now - cs->cur_start;
			if (runnable)
				st->preemptions++;
		}
		ts = bpf_task_storage_get(&task_state, prev, 0,
					  runnable ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
		if (ts) {
			ts->wait_start = runnable ? now : 0;
			ts->throttled = runnable && cfg_throttle_cause ? kh_task_throttled(prev) : 0;
		} else if (runnable) {
			count(KH_CNT_STORAGE_MISS);
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
	if (!next->pid)
		return 0;
	cgid = task_cgid(next);
	cs->cur_cgid = cgid;
	ts = bpf_task_storage_get(&task_state, next, 0, 0);
	if (!ts || !ts->wait_start)
		return 0;
	if (now > ts->wait_start)
		end_wait(cs, cgid, ts->wait_start, now, ts->throttled);
	ts->wait_start = 0;
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

SEC("fentry/throttle_cfs_rq")
int BPF_PROG(handle_throttle_cfs_rq, struct cfs_rq *cfs_rq)
{
	__u64 key = (__u64)cfs_rq, now = bpf_ktime_get_ns();

	bpf_map_update_elem(&throttle_start, &key, &now, BPF_ANY);
	return 0;
}

SEC("fentry/unthrottle_cfs_rq")
int BPF_PROG(handle_unthrottle_cfs_rq, struct cfs_rq *cfs_rq)
{
	__u64 key = (__u64)cfs_rq, now = bpf_ktime_get_ns(), cgid, *start;
	struct kh_throttle_stats *v, init = {};

	start = bpf_map_lookup_elem(&throttle_start, &key);
	if (!start)
		return 0;
	cgid = cfs_rq_cgid(cfs_rq);
	v = bpf_map_lookup_elem(&throttle_stats, &cgid);
	if (!v) {
		bpf_map_update_elem(&throttle_stats, &cgid, &init, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&throttle_stats, &cgid);
	}
	if (v) {
		v->events++;
		if (now > *start)
			v->throttled_ns += now - *start;
	}
	bpf_map_delete_elem(&throttle_start, &key);
	return 0;
}
