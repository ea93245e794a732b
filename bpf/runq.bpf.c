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
 * Memory: the per-cgroup and per-pair counters are shared slots, one per
 * cgroup (pair) whatever the number of CPUs, updated with atomic adds.
 * Per-CPU copies would grow with the possible CPUs: at 128 CPUs a per-CPU
 * cgroup_stats alone took 474 MB. They are not LRU maps either: an LRU
 * insert evicts another cgroup's entry instead of failing (so "full" was
 * never seen), and an evicted element reused under a new key while another
 * CPU still held a pointer to it took that CPU's increments under the new
 * key. Here a new cgroup with no slot left is counted (KH_CNT_STATS_FULL,
 * KH_CNT_PAIRS_FULL), and userspace frees the slots of cgroups that are
 * gone (collect/bpf_maps.cpp).
 *
 * Reading: the slot arrays are mmapable. The agent reads them in place,
 * only the slots whose bit is set in the moved bitmaps, so a tick at
 * thousands of mostly idle cgroups costs neither a syscall per entry nor a
 * copy of the whole map (nor a BPF iterator, which some kernels refuse).
 *
 * Cost: a shared entry costs a hash lookup and atomic adds, which on every
 * switch would make sched_switch about a third dearer. So each CPU gathers
 * the counts of one cgroup at a time in its cpu_state (plain adds, only that
 * CPU writes them) and adds them to cgroup_stats when the cgroup changes,
 * when the CPU goes idle, or cfg_pending_ns after the first of them. Readers
 * of cgroup_stats see a cgroup's counts that late at most (plus, as before,
 * the slice running now: CPU time is charged when a task is switched out).
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

struct cpu_state {
	__u64 cur_cgid;   /* cgroup v2 id of the task on this CPU; 0 = idle */
	__u64 cur_start;  /* when it was switched in; 0 = unknown */
	__u64 head;       /* slices pushed so far; ring[(head - 1) % RING] is newest */
	__u64 switches;   /* sched_switch events not yet added to counters */
	struct slice ring[SLICE_RING];
	struct pending pd;
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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct kh_pair);
	__type(value, __u32);
} pair_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u64);
} pair_moved SEC(".maps");

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

/*
 * Slots. The loader fills cgroup_free and pair_free with every slot; a new
 * cgroup (pair) pops one, writes its id into it, then publishes it in
 * cgroup_slots (pair_slots). Userspace gives back the slots of cgroups that
 * are gone: it deletes the hash entry, waits a tick, zeroes the slot and
 * pushes it back.
 *
 * Races, said out loud:
 * - Two CPUs may take a slot for the same new id at once: the loser's
 *   BPF_NOEXIST update fails, it frees its slot again and adds to the
 *   winner's.
 * - A CPU holding a slot looked up just before userspace deleted its hash
 *   entry adds to it for the rest of that program run; userspace zeroes it
 *   only a tick later. A CPU's pending counts of a removed cgroup, added
 *   after the delete, take a new slot: userspace finds the cgroup gone and
 *   gives that back too.
 * - Userspace reads slots while CPUs add to them: each 8-byte counter is
 *   read whole, but one batch's fields (wait_ns, waits, hist, cause_ns) may
 *   be read half-added; the rest shows in the next read.
 */

/* Marks slot as changed in a moved bitmap (an atomic or, only if unset). */
static __always_inline void mark_moved(void *moved, __u32 slot)
{
	__u32 w = slot / 64;
	__u64 bit = 1ULL << (slot % 64);
	__u64 *m = bpf_map_lookup_elem(moved, &w);

	if (m && !(*m & bit))
		__sync_fetch_and_or(m, bit);
}

/*
 * The slot of cgroup cgid in cgroup_stats, taken on first use; KH_NO_SLOT
 * if none is free (counted). A global function: verified once.
 */
__noinline __u32 kh_cgroup_slot(__u64 cgid)
{
	struct kh_cgroup_stats *st;
	__u32 *sp, slot;

	sp = bpf_map_lookup_elem(&cgroup_slots, &cgid);
	if (sp)
		return *sp;
	if (bpf_map_pop_elem(&cgroup_free, &slot))
		goto full;
	st = bpf_map_lookup_elem(&cgroup_stats, &slot);
	if (!st)
		goto full;
	st->id = cgid;
	if (!bpf_map_update_elem(&cgroup_slots, &cgid, &slot, BPF_NOEXIST))
		return slot;
	/* Another CPU published one first (or the index is full): give ours back. */
	st->id = 0;
	bpf_map_push_elem(&cgroup_free, &slot, 0);
	sp = bpf_map_lookup_elem(&cgroup_slots, &cgid);
	if (sp)
		return *sp;
full:
	count(KH_CNT_STATS_FULL);
	return KH_NO_SLOT;
}

/* The same for the (victim, aggressor) pair in interference. */
__noinline __u32 kh_pair_slot(__u64 victim, __u64 aggressor)
{
	struct kh_pair key = { .victim = victim, .aggressor = aggressor };
	struct kh_pair_stats *v;
	__u32 *sp, slot;

	sp = bpf_map_lookup_elem(&pair_slots, &key);
	if (sp)
		return *sp;
	if (bpf_map_pop_elem(&pair_free, &slot))
		goto full;
	v = bpf_map_lookup_elem(&interference, &slot);
	if (!v)
		goto full;
	v->victim = victim;
	v->aggressor = aggressor;
	if (!bpf_map_update_elem(&pair_slots, &key, &slot, BPF_NOEXIST))
		return slot;
	v->victim = 0;
	v->aggressor = 0;
	bpf_map_push_elem(&pair_free, &slot, 0);
	sp = bpf_map_lookup_elem(&pair_slots, &key);
	if (sp)
		return *sp;
full:
	count(KH_CNT_PAIRS_FULL);
	return KH_NO_SLOT;
}

/*
 * Adds this CPU's pending counts to their cgroup's shared entry (atomic adds,
 * since other CPUs add to it too) and empties them. If the map is full, the
 * batch is lost and counted once (KH_CNT_STATS_FULL).
 */
static __always_inline void flush_pending(struct pending *pd)
{
	struct kh_cgroup_stats *st;
	__u32 i, b, slot;

	if (!pd->cgid)
		return;
	slot = kh_cgroup_slot(pd->cgid);
	st = bpf_map_lookup_elem(&cgroup_stats, &slot);
	if (st) {
		if (pd->cpu_ns)
			kh_add(&st->cpu_ns, pd->cpu_ns);
		if (pd->preemptions)
			kh_add(&st->preemptions, pd->preemptions);
		if (pd->waits) {
			kh_add(&st->wait_ns, pd->wait_ns);
			kh_add(&st->waits, pd->waits);
		}
		for (i = 0; i < KH_NR_WAIT_CAUSES; i++)
			if (pd->cause_ns[i])
				kh_add(&st->cause_ns[i], pd->cause_ns[i]);
		for (i = 0; i < PENDING_HIST; i++) {
			if (i >= pd->nhist)
				break;
			b = pd->hist_b[i];
			if (b >= KH_HIST_BUCKETS)
				b = KH_HIST_BUCKETS - 1;
			kh_add(&st->hist[b], pd->hist_n[i]);
		}
		mark_moved(&cgroup_moved, slot);
	}
	pd->cgid = 0;
	pd->wait_ns = 0;
	pd->waits = 0;
	pd->cpu_ns = 0;
	pd->preemptions = 0;
	for (i = 0; i < KH_NR_WAIT_CAUSES; i++)
		pd->cause_ns[i] = 0;
	pd->nhist = 0;
}

/* Publishes everything this CPU gathered: pending counts, switches. */
static __always_inline void flush_cpu(struct cpu_state *cs, __u64 now)
{
	flush_pending(&cs->pd);
	cs->pd.since = now;
	if (cs->switches) {
		count_n(KH_CNT_SWITCHES, cs->switches);
		cs->switches = 0;
	}
}

/* This CPU's pending counts for cgroup cgid (those of another cgroup are flushed first). */
static __always_inline struct pending *pending_of(struct cpu_state *cs, __u64 cgid, __u64 now)
{
	struct pending *pd = &cs->pd;

	if (pd->cgid != cgid) {
		flush_pending(pd);
		pd->cgid = cgid;
		pd->since = now;
	}
	return pd;
}

/* Counts one wait in bucket b of the pending histogram (flushing if it has no room). */
static __always_inline void pending_hist(struct pending *pd, __u32 b)
{
	__u32 i, n;
	__u64 cgid, since;

	n = pd->nhist;
	for (i = 0; i < PENDING_HIST; i++) {
		if (i >= n)
			break;
		if (pd->hist_b[i] == b) {
			pd->hist_n[i]++;
			return;
		}
	}
	/*
	 * A fresh load of the count, not the loop's register: 6.1's verifier
	 * derives an impossible range for it after the loop (umin 4, umax 3),
	 * does not prune the dead branch, and loses the pointer on the index.
	 */
	n = *(volatile __u32 *)&pd->nhist;
	if (n >= PENDING_HIST) {
		/* No room for another bucket: add the batch, keep gathering. */
		cgid = pd->cgid;
		since = pd->since;
		flush_pending(pd);
		pd->cgid = cgid;
		pd->since = since;
		n = 0;
	}
	n &= PENDING_HIST - 1;
	pd->hist_b[n] = b;
	pd->hist_n[n] = 1;
	pd->nhist = n + 1;
}

/*
 * Adds ns of a victim's wait to the (victim, aggressor) pair. A global
 * function: called for each run of a ring walk, inlined it multiplied the
 * states the verifier explores in handle_sched_switch tenfold.
 */
__noinline int pair_add(__u64 victim, __u64 aggressor, __u64 ns)
{
	__u32 slot = kh_pair_slot(victim, aggressor);
	struct kh_pair_stats *v = bpf_map_lookup_elem(&interference, &slot);

	if (!v)
		return 0;
	kh_add(&v->wait_ns, ns);
	kh_add(&v->count, 1);
	mark_moved(&pair_moved, slot);
	return 1;
}

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
 * to the pairs. Returns how many slices it looked at (SLICE_RING: the ring
 * may not reach back to w0).
 */
static __always_inline int blame_ring(struct cpu_state *cs, __u64 head, __u64 victim, __u64 w0, __u64 w1,
				      struct blame *b)
{
	int i;

	for (i = 0; i < SLICE_RING; i++) {
		struct slice *sl = &cs->ring[(head - 1 - i) & (SLICE_RING - 1)];
		__u64 from, to, ov;

		if (i >= head || sl->end <= w0)
			break;
		from = sl->start > w0 ? sl->start : w0;
		to = sl->end < w1 ? sl->end : w1;
		ov = to > from ? to - from : 0;
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
	__u64 wait = now - t0, rest, same, other;
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

	if (same + other > span) /* clock skew between CPUs */
		other = span > same ? span - same : 0;
	rest = span - same - other;
	pd->cause_ns[KH_WAIT_SAME_CGROUP] += same;
	pd->cause_ns[KH_WAIT_OTHER_CGROUP] += other;
	pd->cause_ns[KH_WAIT_UNATTRIBUTED] += rest;
	if (wait >= cfg_event_min_ns) {
		__u64 top_ns, top = blame_top(&bl, &top_ns);

		cause = other >= same ? (other >= rest ? KH_WAIT_OTHER_CGROUP : KH_WAIT_UNATTRIBUTED)
				      : KH_WAIT_SAME_CGROUP;
		if (thr >= other && thr >= same && thr >= rest)
			cause = KH_WAIT_THROTTLED;
		report_wait(cgid, wait, now, cause == KH_WAIT_THROTTLED ? 0 : top,
			    cause == KH_WAIT_THROTTLED ? 0 : top_ns, cause);
	}
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
		__u64 ov = now - (cs->cur_start > w0 ? cs->cur_start : w0);

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
	ts->acc_same = b.same;
	ts->acc_other = b.other;
	ts->acc_top = blame_top(&b, &ts->acc_top_ns);
	ts->seg_start = now;
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
 * wait began if later. A wait that began throttled is reported as
 * throttled, with no aggressor.
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
			agg = cs->cur_cgid;
			agg_ns = now - (cs->cur_start > t0 ? cs->cur_start : t0);
			if (agg_ns > now - t0)
				agg_ns = 0; /* clock skew between CPUs */
			cause = agg == cgid ? KH_WAIT_SAME_CGROUP : KH_WAIT_OTHER_CGROUP;
			if (agg == cgid) {
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
