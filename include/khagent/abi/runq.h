/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Structures shared by bpf/runq.bpf.c and the userspace collector.
 * Plain C, fixed-width types, no pointers; every struct size is asserted so
 * that a change on one side cannot silently misread the other.
 */
#ifndef KHAGENT_ABI_RUNQ_H
#define KHAGENT_ABI_RUNQ_H

#ifdef __bpf__
/* vmlinux.h provides __u32/__u64 */
#else
#include <linux/types.h>
#endif

#ifdef __cplusplus
#define KH_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define KH_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/*
 * Log-linear run-queue wait histogram, in nanoseconds.
 * Bucket 0 holds waits below 2^KH_HIST_MIN_SHIFT ns (1.024 us). Above that each
 * power of two [2^k, 2^(k+1)) is split into KH_HIST_SUBS equal sub-buckets, up
 * to 2^KH_HIST_MAX_SHIFT ns (~68.7 s); the last bucket also takes everything
 * larger. A sub-bucket spans at most 1/4 of its lower bound, so its midpoint is
 * within 12.5% of any value in it.
 */
enum kh_hist_layout {
	KH_HIST_MIN_SHIFT = 10,
	KH_HIST_MAX_SHIFT = 36,
	KH_HIST_SUB_SHIFT = 2,
	KH_HIST_SUBS = 1 << KH_HIST_SUB_SHIFT,
	KH_HIST_BUCKETS = 1 + (KH_HIST_MAX_SHIFT - KH_HIST_MIN_SHIFT) * KH_HIST_SUBS,
};

/* floor(log2(v)) for v > 0, loop-free so the BPF verifier takes it as is. */
static inline __u32 kh_log2_u64(__u64 v)
{
	__u32 r = 0, s;

	s = (v > 0xFFFFFFFFULL) << 5; v >>= s; r |= s;
	s = (v > 0xFFFF) << 4; v >>= s; r |= s;
	s = (v > 0xFF) << 3; v >>= s; r |= s;
	s = (v > 0xF) << 2; v >>= s; r |= s;
	s = (v > 0x3) << 1; v >>= s; r |= s;
	r |= (__u32)(v >> 1);
	return r;
}

/* Histogram bucket of a wait of ns nanoseconds (see enum kh_hist_layout). */
static inline __u32 kh_hist_bucket(__u64 ns)
{
	__u32 k, sub;

	if (ns < (1ULL << KH_HIST_MIN_SHIFT))
		return 0;
	k = kh_log2_u64(ns);
	if (k >= KH_HIST_MAX_SHIFT)
		return KH_HIST_BUCKETS - 1;
	sub = (__u32)(ns >> (k - KH_HIST_SUB_SHIFT)) & (KH_HIST_SUBS - 1);
	return 1 + (k - KH_HIST_MIN_SHIFT) * KH_HIST_SUBS + sub;
}

/* Why a task waited; the wait of every switch-in is split across these. */
enum kh_wait_cause {
	KH_WAIT_THROTTLED = 0,   /* its own cgroup (or an ancestor) was CFS-throttled */
	KH_WAIT_SAME_CGROUP,     /* another task of the same cgroup held the CPU */
	KH_WAIT_OTHER_CGROUP,    /* another cgroup held the CPU: interference */
	KH_WAIT_UNATTRIBUTED,    /* older than the slice ring, or the CPU was idle */
	KH_WAIT_STOLEN,          /* the CPU itself did not run: a vCPU stall (struct kh_stall_stats) */
	KH_NR_WAIT_CAUSES,
};

/*
 * Version of the maps' layout and meaning, also in the BPF object's rodata
 * (kh_abi_version): a reader of another process's pinned maps checks it.
 * 2: cgroup_stats, interference and throttle_stats are shared hashes (one
 *    value per key, updated with atomic adds), no longer per-CPU LRU hashes.
 * 3: counter KH_CNT_REMOVALS_LOST; map removed_cgroups (a queue of removed
 *    cgroup ids, popped by the process that loaded the object).
 * 4: kh_cgroup_stats.seen, written by the read_moved_stats iterator.
 * 5: cgroup_stats and interference are arrays of slots (mmapable), each
 *    slot naming its owner (kh_cgroup_stats.id, kh_pair_stats.victim and
 *    aggressor; 0 = free); the hashes cgroup_slots and pair_slots map an id
 *    or pair to its slot; cgroup_moved and pair_moved are bitmaps of the
 *    slots changed since the owner of the maps last read them. No
 *    read_moved_stats iterator, no seen[].
 * 6: kh_throttle_stats.events counts throttled periods as cpu.stat's
 *    nr_throttled does (was: per-CPU unthrottles); field nr_throttled.
 * 7: map reclaim_stats (struct kh_reclaim_stats per cgroup v2 id); counter
 *    KH_CNT_RECLAIM_FULL.
 * 8: wait cause KH_WAIT_STOLEN (kh_cgroup_stats.cause_ns has 5 entries);
 *    per-CPU map stall_stats (struct kh_stall_stats).
 */
enum { KH_RUNQ_ABI_VERSION = 8 };

/*
 * A slot of the cgroup_stats array: one per cgroup, shared by all CPUs. Each
 * CPU adds its batches to it with atomic adds (flush_pending, in
 * bpf/runq_slots.bpf.h): a count shows here at most cfg_pending_ns after it
 * happened, or when its CPU goes idle. All counters only grow while the slot
 * has one owner.
 */
struct kh_cgroup_stats {
	__u64 id;                            /* cgroup v2 id owning the slot; 0 = free */
	__u64 wait_ns;                       /* run-queue wait, all causes */
	__u64 waits;                         /* switch-ins that ended a measured wait */
	__u64 cpu_ns;                        /* time on CPU */
	__u64 preemptions;                   /* switched out while still runnable */
	__u64 cause_ns[KH_NR_WAIT_CAUSES];   /* wait_ns split by enum kh_wait_cause */
	__u64 hist[KH_HIST_BUCKETS];         /* waits by duration, see kh_hist_layout */
};
KH_STATIC_ASSERT(sizeof(struct kh_cgroup_stats) == sizeof(__u64) * (5 + KH_NR_WAIT_CAUSES + KH_HIST_BUCKETS),
	       "kh_cgroup_stats layout");

/* Key of the pair_slots map. */
struct kh_pair {
	__u64 victim;     /* cgroup v2 id of the task that waited */
	__u64 aggressor;  /* cgroup v2 id of a task that ran on that CPU meanwhile */
};
KH_STATIC_ASSERT(sizeof(struct kh_pair) == 16, "kh_pair layout");

/* A slot of the interference array (shared, atomic adds); victim 0 = free. */
struct kh_pair_stats {
	__u64 victim;   /* cgroup v2 id of the task that waited */
	__u64 aggressor;/* cgroup v2 id of a task that ran on that CPU meanwhile */
	__u64 wait_ns;  /* part of the victim's waits during which the aggressor ran */
	__u64 count;    /* stretches of the victim's waits in which the aggressor ran
	                 * (a wait interleaving A, B, A counts twice for A) */
};
KH_STATIC_ASSERT(sizeof(struct kh_pair_stats) == 32, "kh_pair_stats layout");

/* A slot index that names none: the maps were full. */
#define KH_NO_SLOT 0xffffffffu

/* Value of the throttle_stats map (fentry source; shared, atomic updates). */
struct kh_throttle_stats {
	/* Periods in which the cgroup was throttled, as cpu.stat's
	 * nr_throttled: the rises of the kernel's count seen at unthrottles. */
	__u64 events;
	__u64 throttled_ns;  /* time from throttle to unthrottle, summed over CPUs */
	__u64 nr_throttled;  /* the kernel's count (cfs_bandwidth) last seen */
};
KH_STATIC_ASSERT(sizeof(struct kh_throttle_stats) == 24, "kh_throttle_stats layout");

/*
 * Why a task reclaimed memory itself (direct reclaim, timed from the vmscan
 * tracepoints' begin to end): the node (or a NUMA node) ran short, or a
 * memory cgroup (the task's own or an ancestor) reached its limit or high.
 */
enum kh_reclaim_kind {
	KH_RECLAIM_NODE = 0,  /* mm_vmscan_direct_reclaim_*: the page allocator */
	KH_RECLAIM_MEMCG,     /* mm_vmscan_memcg_reclaim_*: a cgroup's limit */
	KH_NR_RECLAIM_KINDS,
};

/*
 * Value of the reclaim_stats map, keyed by the cgroup v2 id of the task that
 * reclaimed (shared, atomic updates): what the cgroup's tasks paid in direct
 * reclaim. The time is wall time between begin and end, sleeps included, as
 * PSI counts a memory stall.
 */
struct kh_reclaim_stats {
	__u64 ns[KH_NR_RECLAIM_KINDS];     /* time in direct reclaim */
	__u64 count[KH_NR_RECLAIM_KINDS];  /* reclaims ended */
	__u64 pages[KH_NR_RECLAIM_KINDS];  /* pages they reclaimed */
};
KH_STATIC_ASSERT(sizeof(struct kh_reclaim_stats) == 48, "kh_reclaim_stats layout");

/*
 * Value of the per-CPU stall_stats map: what the CPU's stall detector saw.
 * A BPF timer pinned to the CPU fires every cfg_stall_period_ns while the
 * CPU is busy; when it fires more than cfg_stall_min_ns late, the CPU ran
 * nothing at all from when it was due until it fired (on a VM, the vCPU
 * had lost its physical CPU; on any machine, interrupts were off that
 * long). That stretch is a stall: waits overlapping it are charged to
 * KH_WAIT_STOLEN, not to the task that was current, which did not run
 * either. Only this CPU writes its value.
 */
struct kh_stall_stats {
	__u64 stolen_ns;   /* stalls' total */
	__u64 stalls;      /* stalls seen */
	__u64 longest_ns;  /* the longest stall */
	__u64 ticks;       /* timer expiries (the detector's own cost) */
	__s32 err;         /* the last bpf_timer_start error (negative errno); 0 = none */
	__u32 state;       /* enum kh_stall_state */
};
KH_STATIC_ASSERT(sizeof(struct kh_stall_stats) == 40, "kh_stall_stats layout");

/* kh_stall_stats::state, as the CPU's timer stands. */
enum kh_stall_state {
	KH_STALL_IDLE = 0,    /* not armed: the CPU was idle when it last fired (or never busy) */
	KH_STALL_ARMED = 1,   /* firing every period */
	KH_STALL_FAILED = 2,  /* bpf_timer_start refused (err): no detection on this CPU */
};

/* Value of the protected map: a cgroup whose long waits are reported at once. */
struct kh_protect {
	__u64 threshold_ns;   /* a single wait at least this long is an event */
	__u64 last_event_ns;  /* written by BPF: rate limit per cgroup */
};
KH_STATIC_ASSERT(sizeof(struct kh_protect) == 16, "kh_protect layout");

/* Ring buffer record: one over-threshold wait of a protected cgroup. */
struct kh_wait_event {
	__u64 ts_ns;         /* when the wait ended, or was seen going on (bpf_ktime_get_ns,
	                      * CLOCK_MONOTONIC) */
	__u64 cgroup_id;     /* the cgroup that waited */
	__u64 wait_ns;
	__u64 aggressor_id;  /* the cgroup that held the CPU longest in total meanwhile; 0 = none */
	__u64 aggressor_ns;
	__u32 cause;         /* enum kh_wait_cause with the largest share of the wait */
	__u16 cpu;
	__u16 flags;         /* KH_EVENT_* */
};

/*
 * kh_wait_event::flags. ONGOING: the wait had not ended when it was seen (by
 * the task iterator userspace runs each tick); ts_ns is when it was seen,
 * wait_ns the wait so far, the aggressor whoever held the task's CPU then
 * (aggressor_ns: since it was switched in, or since the wait began if
 * later). The same wait is reported again when it ends.
 */
enum { KH_EVENT_ONGOING = 1 };
KH_STATIC_ASSERT(sizeof(struct kh_wait_event) == 48, "kh_wait_event layout");

/* Global counters of the BPF side itself, indexed by enum kh_counter. */
enum kh_counter {
	KH_CNT_SWITCHES = 0,        /* sched_switch events seen (added with each CPU's
	                             * pending counts: up to cfg_pending_ns late) */
	KH_CNT_WAKEUPS,             /* sched_wakeup + sched_wakeup_new events */
	KH_CNT_STORAGE_MISS,        /* task storage could not be created */
	KH_CNT_RING_OVERFLOW,       /* waits older than the slice ring */
	KH_CNT_STATS_FULL,          /* no free cgroup_stats slot (maps full): one CPU's
	                             * batch of a cgroup's counts was not counted */
	KH_CNT_PAIRS_FULL,          /* no free interference slot (maps full) */
	KH_CNT_EVENTS,              /* wait events sent to userspace */
	KH_CNT_EVENTS_DROPPED,      /* wait events lost: ring buffer full */
	KH_CNT_REMOVALS_LOST,       /* removed cgroups not queued: removed_cgroups full */
	KH_CNT_RECLAIM_FULL,        /* a reclaim not counted: reclaim_stats full */
	KH_NR_COUNTERS,
};

#endif /* KHAGENT_ABI_RUNQ_H */
