/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Who paid for memory reclaim: the time each cgroup's tasks spent reclaiming
 * memory themselves (direct reclaim), from the vmscan tracepoints. Kswapd's
 * background reclaim costs no task a stall and is not counted. In the page
 * allocator's and the memory cgroup charge path the kernel marks the same
 * stretches as memory stalls for PSI (psi_memstall_enter around
 * __perform_reclaim and around try_to_free_mem_cgroup_pages in the charge
 * and memory.high paths), so for one task reclaiming alone the time here is
 * its cgroup's PSI "some" memory stall, less the other stalls PSI counts
 * (refaults of its working set, compaction, the memory.high penalty sleep).
 *
 * Left out:
 *  - the node's reclaim for allocations of more than PAGE_ALLOC_COSTLY_ORDER
 *    (8 pages: huge pages, large kernel buffers): fragmentation, not a node
 *    short of memory;
 *  - reclaim by the process that loaded this object (the agent): writing a
 *    lower limit reclaims synchronously in the writer, charged to the
 *    writer's cgroup and not a stall (since 5.8 not counted by PSI either).
 *    Other writers of limits (memory.max, memory.reclaim, force_empty) are
 *    charged the same way, to their own cgroup.
 *
 * Direct reclaim does not nest: a task in reclaim runs with PF_MEMALLOC and
 * charges no memory cgroup, so one start per task is enough. The cgroup is
 * the task's when the reclaim began. An end with no start (attached
 * mid-reclaim) is not counted.
 */
#define KH_COSTLY_ORDER 3 /* PAGE_ALLOC_COSTLY_ORDER */

static __always_inline void reclaim_begins(__u32 kind, int order)
{
	struct task_struct *p = bpf_get_current_task_btf();
	struct task_state *ts;

	if (order > KH_COSTLY_ORDER || (cfg_self_tgid && p->tgid == cfg_self_tgid))
		return;
	ts = bpf_task_storage_get(&task_state, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!ts) {
		count(KH_CNT_STORAGE_MISS);
		return;
	}
	ts->reclaim_start = bpf_ktime_get_ns();
	ts->reclaim_cgid = task_cgid(p);
	ts->reclaim_kind = kind;
}

static __always_inline void reclaim_ends(__u32 kind, unsigned long nr_reclaimed)
{
	struct task_struct *p = bpf_get_current_task_btf();
	struct kh_reclaim_stats *st, zero = {};
	struct task_state *ts;
	__u64 now, cgid;

	ts = bpf_task_storage_get(&task_state, p, 0, 0);
	if (!ts || !ts->reclaim_start || ts->reclaim_kind != kind)
		return;
	now = bpf_ktime_get_ns();
	cgid = ts->reclaim_cgid;
	st = bpf_map_lookup_elem(&reclaim_stats, &cgid);
	if (!st) {
		/* Another CPU may make the entry first: then use its. */
		bpf_map_update_elem(&reclaim_stats, &cgid, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&reclaim_stats, &cgid);
		if (!st) {
			count(KH_CNT_RECLAIM_FULL);
			ts->reclaim_start = 0;
			return;
		}
	}
	if (kind < KH_NR_RECLAIM_KINDS) {
		__sync_fetch_and_add(&st->ns[kind], now - ts->reclaim_start);
		__sync_fetch_and_add(&st->count[kind], 1);
		__sync_fetch_and_add(&st->pages[kind], nr_reclaimed);
	}
	ts->reclaim_start = 0;
}
