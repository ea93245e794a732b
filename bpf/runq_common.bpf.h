/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What every part of runq.bpf.c shares: constants, the load-time settings
 * (.rodata, set by the loader), the per-CPU and per-task state, all 20 maps,
 * and the two helpers everything calls (count, task_cgid). One place for
 * them, so that each map is declared once, with what it holds, and the other
 * headers only use them. Not an ABI: the layouts userspace reads are in
 * include/khagent/abi/runq.h.
 */
#pragma once

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "khagent/abi/runq.h"

#define TASK_RUNNING 0
#define SLICE_RING 16 /* power of two */
#define STALL_RING 8  /* power of two */
#define KH_EEXIST 17  /* errno: vmlinux.h has no macros */

/*
 * An add to a counter shared by all CPUs: BPF_ATOMIC_ADD, the result unused
 * (a `lock add` on x86). Concurrent adds from several CPUs never lose one.
 */
#define kh_add(p, v) __sync_fetch_and_add((p), (v))

/* Layout version of the maps (include/khagent/abi/runq.h), for readers of the pins. */
const volatile __u32 kh_abi_version = KH_RUNQ_ABI_VERSION;

/* Record interference pairs (victim, aggressor); off saves map updates. */
const volatile bool cfg_interference = true;
/* Use the cfs_rq throttle state to tell throttle-caused waits apart. */
const volatile bool cfg_throttle_cause = true;

/*
 * Counts gathered on one CPU for one cgroup are added to cgroup_stats at the
 * latest this long after the first of them (checked at each switch; a CPU
 * going idle adds them at once).
 */
const volatile __u64 cfg_pending_ns = 10000000;

/* Fast path: waits shorter than this never look up the protected map. */
const volatile __u64 cfg_event_min_ns = ~0ULL;
/* Fast path: at most one event per protected cgroup per this interval. */
const volatile __u64 cfg_event_interval_ns = 50000000;

/*
 * Kernels without the cfs_rq throttled clock (before 6.6) but with fentry:
 * keep one per cfs_rq from the throttle/unthrottle programs (throttle_clock).
 */
const volatile bool cfg_fentry_clock = false;
/*
 * The process that loaded the object (the agent): its own reclaim is the
 * synchronous reclaim of the limits it writes, not a stall of its cgroup,
 * and is not counted.
 */
const volatile __u32 cfg_self_tgid = 0;

/*
 * The stall detector (runq_stall.bpf.h): each busy CPU's timer fires every
 * cfg_stall_period_ns; firing later than cfg_stall_min_ns is a stall. A
 * period of 0 turns it off.
 */
const volatile __u64 cfg_stall_period_ns = 0;
const volatile __u64 cfg_stall_min_ns = 250000;
/*
 * Set by the loader once every CPU's timer is set up (init_stall_timer):
 * until then, and for good if that failed, sched_switch starts none.
 */
bool stall_enabled = false;


/* A run of one task on a CPU: who ran (cgroup v2 id) and when. */
struct slice {
	__u64 cgid;
	__u64 start;
	__u64 end;
};

#define PENDING_HIST 4 /* distinct histogram buckets a pending batch holds */

/*
 * Counts of one cgroup gathered on this CPU with plain adds, then added to
 * its shared cgroup_stats entry in one go (flush_pending). While a CPU keeps
 * switching between tasks of one cgroup (threads of one service, a client
 * and its server) a switch then costs no hash lookup and no atomic add; when
 * the cgroup changes at every switch, it costs what charging cgroup_stats
 * directly does.
 */
struct pending {
	__u64 cgid;       /* the cgroup these counts belong to; 0 = none */
	__u64 since;      /* when the first of them was gathered (or the last flush) */
	__u64 wait_ns;
	__u64 waits;
	__u64 cpu_ns;
	__u64 preemptions;
	__u64 cause_ns[KH_NR_WAIT_CAUSES];
	__u64 hist_n[PENDING_HIST];  /* waits in bucket hist_b[i] */
	__u32 hist_b[PENDING_HIST];
	__u32 nhist;                 /* slots of hist_b/hist_n in use */
	__u32 pad;
};

/* A stretch in which this CPU ran nothing (runq_stall.bpf.h). */
struct stall {
	__u64 start;
	__u64 end;
};

struct cpu_state {
	__u64 cur_cgid;   /* cgroup v2 id of the task on this CPU; 0 = idle */
	__u64 cur_start;  /* when it was switched in; 0 = unknown */
	__u64 head;       /* slices pushed so far; ring[(head - 1) % RING] is newest */
	__u64 switches;   /* sched_switch events not yet added to counters */
	struct slice ring[SLICE_RING];
	struct pending pd;
	/* Stalls seen so far; stalls[(stall_head - 1) % STALL_RING] is newest. */
	__u64 stall_head;
	struct stall stalls[STALL_RING];
	__u32 stall_state; /* enum kh_stall_state of this CPU's timer */
	__u32 pad;
};

struct task_state {
	__u64 wait_start; /* ns when the current wait began; 0 = not waiting */
	__u64 thr_clock;  /* kh_throttled_clock() when it began (v6.6+) */
	__u64 thr_cfs_rq; /* the cfs_rq that clock was read from; 0 = none */
	__u32 throttled;  /* the wait began on a throttled cfs_rq */
	__u32 sleeping;   /* preempted on its way to sleep, not woken since */
	__u64 reported;   /* wait_start of the wait scan_waits reported going on */
	/*
	 * A wait that moved to another CPU while queued: the part before the
	 * last move, charged on the CPUs it was queued on. Valid while
	 * seg_start > wait_start (else left from an earlier wait).
	 */
	__u64 seg_start;  /* when it last moved: the ring of its CPU covers the rest */
	__u64 acc_same;   /* ns of the earlier part behind its own cgroup */
	__u64 acc_other;  /* ns behind other cgroups (already in the interference pairs) */
	__u64 acc_top;    /* the cgroup that held the CPU longest in total in the earlier part */
	__u64 acc_top_ns;
	__u64 acc_stolen; /* ns of the earlier part its CPUs stalled */
	__u64 reclaim_start; /* when its direct reclaim began; 0 = not reclaiming */
	__u64 reclaim_cgid;  /* its cgroup v2 id then, which pays for all of it */
	__u32 reclaim_kind;  /* enum kh_reclaim_kind of that reclaim */
	__u32 pad;
};


/*
 * The counters of each cgroup, summed over all CPUs, in slots of an array
 * that userspace maps into its memory (BPF_F_MMAPABLE) and reads in place:
 * a tick costs no copy through the kernel. Each slot names its owner
 * (kh_cgroup_stats.id; 0 = free). cgroup_slots gives a cgroup's slot. When
 * a slot changes, its bit is set in cgroup_moved; the owner of the maps
 * clears the bits it reads, so a tick reads only the slots that moved.
 * Sizes set by the loader (--max-cgroups); all preallocated, so a slot is
 * taken without allocating, and with none left the insert fails (counted).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct kh_cgroup_stats);
} cgroup_stats SEC(".maps");

/* key: cgroup v2 id; value: its slot in cgroup_stats */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u32);
} cgroup_slots SEC(".maps");

/* Bit s of word s / 64: slot s of cgroup_stats changed since it was read. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} cgroup_moved SEC(".maps");

/* Slots of cgroup_stats given back by userspace (zeroed), for reuse. */
struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, 4096);
	__type(value, __u32);
} cgroup_free SEC(".maps");

/* The same for (victim, aggressor) pairs: victim wait while aggressor ran. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct kh_pair_stats);
} interference SEC(".maps");

/* key: (victim, aggressor) cgroup v2 ids; value: its slot in interference */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct kh_pair);
	__type(value, __u32);
} pair_slots SEC(".maps");

/* Bit s of word s / 64: slot s of interference changed since it was read. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u64);
} pair_moved SEC(".maps");

/* Slots of interference given back by userspace (zeroed), for reuse. */
struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, 16384);
	__type(value, __u32);
} pair_free SEC(".maps");

/* key: cgroup v2 id; value: throttle events and time (fentry source only) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct kh_throttle_stats);
} throttle_stats SEC(".maps");

/* When a cfs_rq was throttled, and its group's nr_throttled then. */
struct kh_throttle_start {
	__u64 ns;
	__u64 nr_throttled;
};

/*
 * key: cgroup v2 id; value: its tasks' direct reclaim (runq_reclaim.bpf.h).
 * Entries only for cgroups whose tasks reclaimed; the agent deletes one
 * when it forgets its cgroup (after its last read), as for throttle_stats.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct kh_reclaim_stats);
} reclaim_stats SEC(".maps");

/* key: struct cfs_rq address; value: when it was throttled */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct kh_throttle_start);
} throttle_start SEC(".maps");

/*
 * key: struct cfs_rq address; value: ns it spent throttled, summed over its
 * finished throttled stretches (cfg_fentry_clock only). A cfs_rq's own
 * throttling only: that of an ancestor does not show here.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} throttle_clock SEC(".maps");

/* key: 0; value: this CPU's running slice, ring of recent slices, pending counts */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpu_state SEC(".maps");

/* The stall detector's timer of each CPU: key = CPU number. */
struct stall_timer {
	struct bpf_timer timer;
	__u64 due;  /* when it should fire next; 0 = not armed */
};

/*
 * key: CPU; value: its stall timer. Sized to the possible CPUs by the loader;
 * never pinned (a pin would keep the timers firing after the agent exits).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stall_timer);
} stall_timers SEC(".maps");

/* key: 0; value: what this CPU's stall detector saw (struct kh_stall_stats) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kh_stall_stats);
} stall_stats SEC(".maps");

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

/*
 * Cgroup v2 ids removed (rmdir) while they had counts here: the loader's
 * process pops them each tick and deletes their entries, so it need not poll
 * every idle cgroup to learn that it is gone.
 */
struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, 4096);
	__type(value, __u64);
} removed_cgroups SEC(".maps");

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

static __always_inline void count_n(__u32 c, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &c);

	if (v)
		*v += n;
}

static __always_inline void count(__u32 c)
{
	count_n(c, 1);
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
