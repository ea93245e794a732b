/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The shared counters: the slot of a cgroup (of a victim, aggressor pair) in
 * cgroup_stats (interference), the moved bitmaps that tell userspace which
 * slots to read, and each CPU's pending batch that is added to a slot in
 * one go (flush_pending). Why slots, and why batches:
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
#pragma once

#include "runq_common.bpf.h"

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
