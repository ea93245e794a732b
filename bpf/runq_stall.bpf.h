/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The stall detector: time a CPU did not run at all. On a VM the vCPU loses
 * its physical CPU now and then (for whole host ticks when the host's CPUs
 * are busy), and the guest's steal counter sees only part of it. A task
 * that waits through such a stall was not kept off the CPU by the task that
 * was current, which did not run either, so the stall is its own cause of
 * the wait (KH_WAIT_STOLEN), and the ladder, which restrains offline, must
 * not count it.
 *
 * How: a BPF timer pinned to each CPU (BPF_F_TIMER_CPU_PIN, Linux 6.7+)
 * fires every cfg_stall_period_ns while the CPU is busy. When it fires more
 * than cfg_stall_min_ns after it was due, the CPU ran nothing from then to
 * now (hard interrupts were not taken, so neither was anything else): the
 * stretch [due, now] is pushed on the CPU's stall ring and counted in
 * stall_stats. A stall shorter than the period may fall between two
 * expiries unseen; of a longer one, the part before the first missed
 * expiry (up to one period) is not seen. The timer is not re-armed while
 * the CPU is idle (no wait to charge there); sched_switch arms it again
 * when a task runs. It is not stopped while one task has the CPU to
 * itself: a task woken onto it (an online task behind an offline loop)
 * waits there before any switch, which is when a stall blamed on the loop
 * would matter most. Its cost: docs/benchmarks.md, "Stolen time". The end of a wait (end_wait) and blame_ring take the
 * stalls that overlap it out of what they blame on who ran.
 *
 * What counts as a stall besides a vCPU stall: a stretch with interrupts
 * off longer than cfg_stall_min_ns (not caused by who ran either), and
 * timer softirqs deferred that long to ksoftirqd under a softirq flood,
 * while tasks did run: that is counted as stolen though it is not (rare
 * at 250 us; a SCHED_FIFO timer on the same CPU agrees with the detector
 * within a few percent on the development host, RunqHost tests).
 *
 * A stall still going on is not in the ring yet (its timer has not fired):
 * stall_ongoing() gives it to readers on other CPUs (the migration handler,
 * the task iterator) from the timer's due time.
 */
#pragma once

#include "runq_common.bpf.h"

/* BPF_F_TIMER_CPU_PIN (uapi, 6.7+); older kernels refuse it with -EINVAL. */
#define KH_TIMER_CPU_PIN (1ULL << 1)


/*
 * The timer fired: a stall if it fired late. Runs in the timer softirq of
 * the CPU it is pinned to, so this CPU's cpu_state is the one it watches.
 */
static int stall_tick(void *map, __u32 *key, struct stall_timer *st)
{
	__u64 now = bpf_ktime_get_ns(), from, to, late;
	struct kh_stall_stats *ss;
	struct cpu_state *cs;
	__u32 zero = 0;

	if (*key != bpf_get_smp_processor_id()) {
		/*
		 * Its CPU went offline and the kernel moved the timer here: stop
		 * it, and let sched_switch arm it again when the CPU is back.
		 */
		st->due = 0;
		cs = bpf_map_lookup_percpu_elem(&cpu_state, &zero, *key);
		if (cs)
			cs->stall_state = KH_STALL_IDLE;
		return 0;
	}
	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	ss = bpf_map_lookup_elem(&stall_stats, &zero);
	if (!cs || !ss)
		return 0;
	ss->ticks++;
	/*
	 * An idle CPU's stall ends when it went idle: after that nothing
	 * waited here. A busy CPU's is not cut at its last switch: the expiry
	 * runs in the softirq of the interrupt that ends a stall, but when the
	 * kernel defers softirqs to ksoftirqd, the switch to it comes first,
	 * and cutting there lost real stalls (a SCHED_FIFO timer on the CPU
	 * saw 18 ms late where the cut detector saw 5).
	 */
	from = st->due;
	to = now;
	if (!cs->cur_cgid && cs->cur_start && cs->cur_start < to)
		to = cs->cur_start;
	if (st->due && to > from + cfg_stall_min_ns) {
		struct stall *r = &cs->stalls[cs->stall_head & (STALL_RING - 1)];

		late = to - from;
		r->start = from;
		r->end = to;
		cs->stall_head++;
		ss->stolen_ns += late;
		ss->stalls++;
		if (late > ss->longest_ns)
			ss->longest_ns = late;
	}
	if (!cs->cur_cgid) {
		/* Idle: nothing waits here. sched_switch arms it again. */
		st->due = 0;
		cs->stall_state = KH_STALL_IDLE;
		ss->state = KH_STALL_IDLE;
		return 0;
	}
	st->due = now + cfg_stall_period_ns;
	ss->err = bpf_timer_start(&st->timer, cfg_stall_period_ns, KH_TIMER_CPU_PIN);
	if (ss->err) {
		st->due = 0;
		cs->stall_state = KH_STALL_FAILED;
		ss->state = KH_STALL_FAILED;
	}
	return 0;
}

/*
 * A task runs on this CPU and its timer is not armed: arm it (at most once
 * a period, after the CPU was idle). A refusal (a kernel without
 * BPF_F_TIMER_CPU_PIN) is kept, and not retried.
 */
static __always_inline void stall_arm(struct cpu_state *cs, __u64 now)
{
	__u32 cpu = bpf_get_smp_processor_id(), zero = 0;
	struct kh_stall_stats *ss = bpf_map_lookup_elem(&stall_stats, &zero);
	struct stall_timer *st = bpf_map_lookup_elem(&stall_timers, &cpu);
	long err;

	if (!st || !ss) {
		cs->stall_state = KH_STALL_FAILED;
		return;
	}
	st->due = now + cfg_stall_period_ns;
	err = bpf_timer_start(&st->timer, cfg_stall_period_ns, KH_TIMER_CPU_PIN);
	ss->err = (__s32)err;
	cs->stall_state = err ? KH_STALL_FAILED : KH_STALL_ARMED;
	ss->state = cs->stall_state;
	if (err)
		st->due = 0;
}

/*
 * How much of [from, to] this CPU stalled, by its stall ring. A global
 * function: verified once, however many slices call it.
 */
__noinline __u64 stall_overlap(struct cpu_state *cs, __u64 from, __u64 to)
{
	__u64 sum = 0, head;
	int i;

	if (!cs || to <= from)
		return 0;
	head = cs->stall_head;
	for (i = 0; i < STALL_RING; i++) {
		struct stall *s = &cs->stalls[(head - 1 - i) & (STALL_RING - 1)];
		__u64 a, b;

		if (i >= head || s->end <= from)
			break;
		a = s->start > from ? s->start : from;
		b = s->end < to ? s->end : to;
		if (b > a)
			sum += b - a;
	}
	return sum;
}

/*
 * How much of [from, to] CPU cpu has been stalling without its timer
 * having fired yet (read from another CPU: the timer overdue by more than
 * cfg_stall_min_ns while the CPU is busy).
 */
static __always_inline __u64 stall_ongoing(struct cpu_state *cs, __u32 cpu, __u64 from, __u64 to)
{
	struct stall_timer *st;
	__u64 a;

	if (!cfg_stall_period_ns || !cs->cur_cgid)
		return 0;
	st = bpf_map_lookup_elem(&stall_timers, &cpu);
	if (!st || !st->due || to <= st->due + cfg_stall_min_ns)
		return 0;
	a = st->due > from ? st->due : from;
	return to > a ? to - a : 0;
}

/* Whether this CPU stalled after t (the newest stall ends last). */
static __always_inline bool stalled_since(const struct cpu_state *cs, __u64 t)
{
	__u64 head = cs->stall_head;

	return head && cs->stalls[(head - 1) & (STALL_RING - 1)].end > t;
}
