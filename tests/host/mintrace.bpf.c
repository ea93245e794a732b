// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A deliberately minimal, independent run-queue wait tracer used by the host
 * tests as a reference for khagent: stamp at wakeup and at switch-out while
 * runnable, subtract at switch-in, keyed by pid, only for the pids in targets.
 * Each wait is also stamped at the end of the handlers (exit_wait_ns), which
 * is what a program attached after this one sees as its own entry time.
 * For watched tasks pinned to one CPU it also sums, per pid, how long each
 * task held that CPU while the watched task waited there (held), stamped as
 * the handlers end. Like khagent it skips wakeups of a task still on its CPU;
 * unlike khagent it starts no wait when a task is preempted on its way to
 * sleep (rare; such a wait is missing from all of its totals).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h" /* kernel layout differences only */

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct totals {
	__u64 wait_ns;
	__u64 waits;
	/* The same waits stamped as each handler ends rather than as it
	 * starts: khagent's programs, attached later, run after this one's,
	 * so their clock reads follow its exit. */
	__u64 exit_wait_ns;
};

struct stamps {
	__u64 entry;
	__u64 exit;
};

/* key: pid to trace; value: its wait totals */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct totals);
} targets SEC(".maps");

/* key: pid; value: when its current wait started */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct stamps);
} start SEC(".maps");

/* key: pid of a task that ran; value: ns it held a CPU while a watched
 * task waited on it */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} held SEC(".maps");

struct queued {
	__u32 pid; /* the watched task waiting on this CPU, 0 if none */
	__u32 pad;
	__u64 since; /* start of the stretch not yet charged to anyone */
};

/* key: CPU; one waiting watched task per CPU is enough for the tests */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct queued);
} waiting SEC(".maps");

/* The held entry of pid, made if missing; looked up before the handler's
 * last clock read, so that only stores follow it. */
static __always_inline __u64 *held_of(__u32 pid)
{
	__u64 zero = 0, *v = bpf_map_lookup_elem(&held, &pid);

	if (v)
		return v;
	bpf_map_update_elem(&held, &pid, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&held, &pid);
}

/* Every handler reads the clock first, as khagent's do. Returns the stamps
 * to complete with the exit time, or NULL. */
static __always_inline struct stamps *stamp(__u32 pid, __u64 now)
{
	struct stamps s = { .entry = now };

	if (!bpf_map_lookup_elem(&targets, &pid))
		return NULL;
	if (bpf_map_update_elem(&start, &pid, &s, BPF_ANY))
		return NULL;
	return bpf_map_lookup_elem(&start, &pid);
}

static __always_inline void wakeup(struct task_struct *p, __u64 now)
{
	struct stamps *s;
	struct queued *q;
	__u32 cpu;

	/* Woken before it left its CPU: not queued anew (khagent and the
	 * kernel's run_delay skip it too). */
	if (kh_task_on_cpu(p))
		return;
	s = stamp(p->pid, now);
	if (!s)
		return;
	cpu = kh_task_cpu(p);
	q = bpf_map_lookup_elem(&waiting, &cpu);
	s->exit = bpf_ktime_get_ns();
	/* Under the rq lock of that CPU, as its switches are: no race. */
	if (q) {
		q->since = s->exit;
		q->pid = p->pid;
	}
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(mt_wakeup, struct task_struct *p)
{
	wakeup(p, bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(mt_wakeup_new, struct task_struct *p)
{
	wakeup(p, bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(mt_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 pid = next->pid, prev_pid = prev->pid;
	__u32 cpu = bpf_get_smp_processor_id();
	struct queued *q = bpf_map_lookup_elem(&waiting, &cpu);
	struct stamps *prev_s = NULL;
	struct totals *t;
	struct stamps *s;
	__u64 began_exit = 0, end, *h = NULL;

	/* prev held this CPU while the watched task waited on it; if prev is
	 * that task, the slot is stale (it ran, so it was not waiting). */
	if (q && q->pid && q->pid != prev_pid)
		h = held_of(prev_pid);
	if (BPF_CORE_READ(prev, __state) == 0)
		prev_s = stamp(prev_pid, now);
	t = bpf_map_lookup_elem(&targets, &pid);
	s = t ? bpf_map_lookup_elem(&start, &pid) : NULL;
	if (t && s) {
		t->wait_ns += now - s->entry;
		t->waits++;
		began_exit = s->exit ? s->exit : s->entry;
		bpf_map_delete_elem(&start, &pid);
	}
	end = bpf_ktime_get_ns();
	/* From here on only stores: held and exit_wait_ns are stamped as the
	 * handlers end, which is when khagent's programs start. */
	if (t && s)
		t->exit_wait_ns += end - began_exit;
	if (q && q->pid) {
		if (h && end > q->since)
			__sync_fetch_and_add(h, end - q->since);
		q->since = end;
		if (q->pid == pid || q->pid == prev_pid)
			q->pid = 0;
	}
	if (prev_s) {
		prev_s->exit = end;
		if (q) {
			q->since = end;
			q->pid = prev_pid;
		}
	}
	return 0;
}
