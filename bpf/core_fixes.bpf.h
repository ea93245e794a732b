/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Kernel layout differences khagent's BPF programs care about, resolved with
 * CO-RE at load time. Each helper names the kernel change that made it needed.
 */
#ifndef KHAGENT_CORE_FIXES_BPF_H
#define KHAGENT_CORE_FIXES_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_core_read.h>

/*
 * task_struct::state became unsigned int __state in v5.14, commit 2f064a59a11f
 * ("sched: Change task_struct::state"). khagent needs v5.11+ (task storage in
 * tracing programs), so both names can be met.
 */
struct task_struct___pre_5_14 {
	volatile long state;
} __attribute__((preserve_access_index));

static __always_inline long kh_task_state(struct task_struct *p)
{
	struct task_struct___pre_5_14 *old = (void *)p;

	/* A direct load: in tp_btf programs p is a BTF pointer (no helper call). */
	if (bpf_core_field_exists(p->__state))
		return p->__state;
	return BPF_CORE_READ(old, state);
}

/*
 * Is the task on a CPU right now (running, or being switched out)?
 * task_struct::on_cpu exists on every SMP kernel khagent can load on (SMP
 * kernels have it unconditionally since v3.1, "sched: Always provide
 * p->on_cpu"). Uniprocessor kernels lack it: answer "no" there, where a
 * task woken while still running can then be counted a wait that began at
 * that wakeup.
 */
static __always_inline int kh_task_on_cpu(struct task_struct *p)
{
	if (!bpf_core_field_exists(p->on_cpu))
		return 0;
	return p->on_cpu; /* a direct load through the BTF pointer */
}

/*
 * The CPU a task is queued on: task_struct::cpu moved into thread_info with
 * THREAD_INFO_IN_TASK (x86 since v5.16, commit bcf9033e5449 "sched: move CPU
 * field back into thread_info if THREAD_INFO_IN_TASK").
 */
struct task_struct___pre_5_16 {
	int cpu;
} __attribute__((preserve_access_index));

static __always_inline __u32 kh_task_cpu(struct task_struct *p)
{
	struct task_struct___pre_5_16 *old = (void *)p;

	if (bpf_core_field_exists(p->thread_info.cpu))
		return BPF_CORE_READ(p, thread_info.cpu);
	return BPF_CORE_READ(old, cpu);
}

/*
 * Is the cfs_rq this task is queued on (or an ancestor's) throttled?
 * cfs_rq::throttle_count exists with CONFIG_CFS_BANDWIDTH, sched_entity::cfs_rq
 * with CONFIG_FAIR_GROUP_SCHED; throttle_count counts throttled ancestors too
 * (it has since v3.2, commit 64660c864f46, "sched: Prevent interactions with
 * throttled entities"). Kernels without either answer "no".
 */
static __always_inline int kh_task_throttled(struct task_struct *p)
{
	struct cfs_rq *cfs_rq;

	if (!bpf_core_field_exists(p->se.cfs_rq) ||
	    !bpf_core_field_exists(struct cfs_rq, throttle_count))
		return 0;
	/* Direct loads through BTF pointers: the verifier makes them fault-safe. */
	cfs_rq = p->se.cfs_rq;
	if (!cfs_rq)
		return 0;
	return cfs_rq->throttle_count > 0;
}

/*
 * A clock of the time the task's cfs_rq has spent throttled with tasks
 * queued on it, in the rq clock's nanoseconds: throttled_clock_self_time
 * adds up the finished stretches (at each unthrottle) and
 * throttled_clock_self marks the start of the current one; both count
 * throttling of an ancestor too. v6.6+, commit 677ea015f231 ("sched: add
 * throttled time stat for throttled children"); they kept their meaning in
 * the task-based throttling of v6.18. The difference of two readings on the
 * same cfs_rq is how long it was throttled in between.
 * Returns 0 (and leaves *clock alone) where the fields do not exist; sets
 * *cfs_rq_addr so that readings of different cfs_rqs (a migration) are
 * never subtracted.
 */
static __always_inline int kh_throttled_clock(struct task_struct *p, __u64 *clock, __u64 *cfs_rq_addr)
{
	struct cfs_rq *cfs_rq;
	struct rq *rq;
	__u64 self, t;

	if (!bpf_core_field_exists(p->se.cfs_rq) ||
	    !bpf_core_field_exists(struct cfs_rq, throttled_clock_self_time) ||
	    !bpf_core_field_exists(struct cfs_rq, rq))
		return 0;
	cfs_rq = p->se.cfs_rq;
	if (!cfs_rq)
		return 0;
	t = cfs_rq->throttled_clock_self_time;
	self = cfs_rq->throttled_clock_self;
	if (self) {
		rq = cfs_rq->rq;
		if (!rq)
			return 0;
		if (rq->clock > self)
			t += rq->clock - self;
	}
	*clock = t;
	*cfs_rq_addr = (__u64)cfs_rq;
	return 1;
}

#endif /* KHAGENT_CORE_FIXES_BPF_H */
