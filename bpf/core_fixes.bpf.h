/* SPDX-License-Identifier: Apache-2.0 */
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

#endif /* KHAGENT_CORE_FIXES_BPF_H */
