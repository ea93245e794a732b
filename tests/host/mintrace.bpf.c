// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A deliberately minimal, independent run-queue wait tracer used by the host
 * tests as a reference for khagent: stamp at wakeup and at switch-out while
 * runnable, subtract at switch-in, keyed by pid, only for the pids in targets.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct totals {
	__u64 wait_ns;
	__u64 waits;
};

/* key: pid to trace; value: its wait totals */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct totals);
} targets SEC(".maps");

/* key: pid; value: ns its current wait started */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} start SEC(".maps");

/* Every handler reads the clock first, as khagent's do. */
static __always_inline void stamp(__u32 pid, __u64 now)
{
	if (bpf_map_lookup_elem(&targets, &pid))
		bpf_map_update_elem(&start, &pid, &now, BPF_ANY);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(mt_wakeup, struct task_struct *p)
{
	stamp(p->pid, bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(mt_wakeup_new, struct task_struct *p)
{
	stamp(p->pid, bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(mt_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 pid = next->pid;
	struct totals *t;
	__u64 *s;

	if (BPF_CORE_READ(prev, __state) == 0)
		stamp(prev->pid, now);
	t = bpf_map_lookup_elem(&targets, &pid);
	if (!t)
		return 0;
	s = bpf_map_lookup_elem(&start, &pid);
	if (!s)
		return 0;
	t->wait_ns += now - *s;
	t->waits++;
	bpf_map_delete_elem(&start, &pid);
	return 0;
}
