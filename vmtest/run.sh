#!/usr/bin/env bash
# Runs a command inside a QEMU guest (TCG, 2 vCPUs) booted from a real kernel
# with pure cgroup v2, and passes the command's exit status out.
#
#   vmtest/run.sh [options] -- COMMAND [ARGS...] [--and COMMAND [ARGS...]]...
#
# Several commands separated by --and run one after the other in the same
# boot (each one runs even if an earlier one failed, and whatever a command
# left running is killed before the next; one boot costs about 10 s of TCG):
# the exit status is the first non-zero one, and each command's status is
# printed.
#
#   --kernel PATH     kernel image to boot (default: Debian's current 6.1
#                     linux-image-*-amd64, downloaded once into the cache)
#   --debian-suite S  boot the current kernel of Debian suite S instead (e.g.
#                     trixie: 6.12), fetched from deb.debian.org into the
#                     cache, its index checked against the archive keyring
#                     and the package against the index's SHA-256
#   --include PATH    a file to put in the guest at the same absolute path,
#                     with the shared libraries it needs (repeatable)
#   --timeout SEC     host-side limit for the whole boot (default 900)
#   --log FILE        where the guest console goes (default: a file in the cache)
#   --mem MIB         guest memory (default 2048)
#   --append ARGS     extra kernel command line (e.g. "tsc=reliable
#                     clocksource=tsc", see below)
#   --cpu MODEL       QEMU -cpu value (default: max,-monitor)
#   --maxcpus N       possible CPUs of the guest (default 2): 2 are online,
#                     the rest hot-pluggable, as on a large node's kernel
#                     (per-CPU BPF maps are sized by the possible CPUs)
#   --hybrid          a hybrid cgroup layout instead, as systemd makes it:
#                     cgroup2 without controllers at /sys/fs/cgroup/unified,
#                     the cpu,cpuacct and cpuset controllers on cgroup v1
#   --modules "M..."  kernel modules to load in the guest before COMMAND
#                     (with the modules they depend on, in order), taken
#                     from the booted Debian kernel's own package; not with
#                     --kernel (repeatable)
#   --disk MIB        a disk for /var/tmp: a RAM disk (brd) of MIB with an
#                     ext2 file system mounted through the ext4 driver, so
#                     files there have page cache the kernel can reclaim,
#                     refault and write back as on a real disk (the guest
#                     otherwise runs from its initramfs, in RAM); it takes
#                     its MIB from the guest's memory as it fills
#
# Known TCG fault, and what the runner does about it: when the kernel patches
# its own code (attaching or detaching a BPF program: trampolines, tracepoint
# static calls), the other vCPU can keep executing a stale translation of the
# patched instruction (so it appears: memory holds the original bytes again
# while that vCPU still takes the INT3). It then traps on the temporary INT3
# forever with interrupts off (seen in __schedule, at the sched_switch
# tracepoint), and the patching CPU waits for it in an IPI. The guest panics
# on the soft lockup or RCU stall (softlockup_panic=1, panic_on_rcu_stall=1)
# instead of hanging until the timeout (loglevel=5 keeps the stall's stack
# dumps on the console). A run whose console shows that signature (a stall
# plus smp_call_function_many_cond, asm_exc_int3 or text_poke, or an oops at
# a patch site, see tcg_patching_lockup) is booted
# again, at most twice, saying so; its console is kept as LOG.attemptN. Any
# other failure is final.
#
# The vCPUs have no MONITOR/MWAIT (-cpu max,-monitor): the guest idles with
# HLT, which makes idle vCPUs sleep instead of spinning in TCG's MWAIT (the
# host tier takes about 60 s instead of several minutes).
# The clock stays the one the kernel picks under TCG (the HPET); every read
# of it is an emulated MMIO access, so time-stamping costs microseconds here
# (--append "tsc=reliable clocksource=tsc" makes it cheap; the fault above
# was seen with either clock).
#
# The guest mounts proc, sysfs, devtmpfs, cgroup2 at /sys/fs/cgroup (with
# +cpu +cpuset +memory, and +io where the kernel has it, enabled for
# children), bpffs and tracefs, then runs
# COMMAND. Its exit status comes back as a sentinel line on the console; no
# sentinel (panic, hang, timeout, crash) is a failure. QEMU's own exit status
# is not trusted: it is 0 even when the guest panics.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${KHAGENT_VMTEST_CACHE:-$root/vmtest/cache}"
kernel=""
suite=""
timeout=900
log=""
mem=2048
append=""
cpu="max,-monitor"
maxcpus=2
hybrid=0
includes=()
modules=()
disk=0

die() { echo "vmtest: $*" >&2; exit 2; }

while (($#)); do
  case "$1" in
    --kernel) kernel="$2"; shift 2 ;;
    --debian-suite) suite="$2"; shift 2 ;;
    --include) includes+=("$2"); shift 2 ;;
    --timeout) timeout="$2"; shift 2 ;;
    --log) log="$2"; shift 2 ;;
    --mem) mem="$2"; shift 2 ;;
    --append) append="$2"; shift 2 ;;
    --cpu) cpu="$2"; shift 2 ;;
    --maxcpus) maxcpus="$2"; shift 2 ;;
    --hybrid) hybrid=1; shift ;;
    --modules) read -ra more <<<"$2"; modules+=("${more[@]}"); shift 2 ;;
    --disk) disk="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -euo/{/^set/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
(($#)) || die "no guest command given (vmtest/run.sh [options] -- COMMAND)"
[[ "$disk" =~ ^[0-9]+$ ]] || die "--disk wants a size in MiB, not '$disk'"
# ext4 asks the crypto API for crc32c at mount: a module of its own.
if ((disk)); then modules+=(brd crc32c_generic ext4); fi
for t in qemu-system-x86_64 cpio busybox dpkg-deb; do
  command -v "$t" >/dev/null || [[ -x /bin/$t ]] || die "$t missing: run scripts/setup.sh"
done
mkdir -p "$cache"

# --- kernel ---------------------------------------------------------------
# The current linux-image of another Debian suite, without touching apt's
# sources: its signed InRelease, the Packages index it vouches for, the .deb
# the index names (each checked by SHA-256).
fetch_suite_kernel() {
  local suite="$1" mirror="http://deb.debian.org/debian" d="$cache/suite-$1" idx pkg file sum
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  for t in curl gpgv xz sha256sum; do command -v "$t" >/dev/null || die "$t missing: run scripts/setup.sh"; done
  mkdir -p "$d"
  curl -sSfL -o "$d/InRelease" "$mirror/dists/$suite/InRelease" || die "cannot fetch $suite's InRelease"
  gpgv --keyring "$keyring" "$d/InRelease" 2>/dev/null || die "$suite's InRelease: bad signature"
  sum=$(awk '/^SHA256:/{f=1;next} /^[A-Za-z]/{f=0} f && $3=="main/binary-amd64/Packages.xz" {print $1}' "$d/InRelease")
  [[ -n "$sum" ]] || die "$suite's InRelease lists no main/binary-amd64/Packages.xz"
  if [[ ! -f "$d/Packages.xz" ]] || ! echo "$sum  $d/Packages.xz" | sha256sum -c --quiet >/dev/null 2>&1; then
    curl -sSfL -o "$d/Packages.xz" "$mirror/dists/$suite/main/binary-amd64/Packages.xz" ||
      die "cannot fetch $suite's package index"
    echo "$sum  $d/Packages.xz" | sha256sum -c --quiet || die "$suite's package index does not match its InRelease"
  fi
  idx=$(xz -dc "$d/Packages.xz")
  pkg=$(awk '/^Package: linux-image-amd64$/{f=1} f && /^Depends:/{sub(/^Depends: /,""); sub(/ .*/,""); print; exit}' <<<"$idx")
  [[ -n "$pkg" ]] || die "no linux-image-amd64 in $suite"
  read -r file sum < <(awk -v p="$pkg" '$0=="Package: "p{f=1} f && /^Filename:/{fn=$2} f && /^SHA256:/{print fn, $2; exit}' <<<"$idx")
  [[ -n "$file" && -n "$sum" ]] || die "no file for $pkg in $suite's index"
  kdir="$cache/$pkg"
  if ! ls "$kdir"/boot/vmlinuz-* >/dev/null 2>&1; then
    echo "vmtest: fetching $pkg from $suite (a kernel package of 70-120 MB, up to 400 MB unpacked, kept in $cache;" \
      "KHAGENT_VMTEST_CACHE moves it)" >&2
    curl -sSfL -o "$d/$(basename "$file")" "$mirror/$file" || die "cannot fetch $file"
    echo "$sum  $d/$(basename "$file")" | sha256sum -c --quiet || die "$file does not match $suite's index"
    rm -rf "$kdir.tmp"
    dpkg-deb -x "$d/$(basename "$file")" "$kdir.tmp"
    mv "$kdir.tmp" "$kdir"
    rm -f "$d/$(basename "$file")"
  fi
  kernel=$(ls "$kdir"/boot/vmlinuz-* | head -1)
}
if [[ -z "$kernel" && -n "$suite" ]]; then
  fetch_suite_kernel "$suite"
fi
if [[ -z "$kernel" ]]; then
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
        awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  if [[ -z "$pkg" ]]; then
    apt-get update -qq >/dev/null 2>&1 || true
    pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  fi
  [[ -n "$pkg" ]] || die "cannot find Debian's linux-image package (apt-get update?)"
  kdir="$cache/$pkg"
  if ! ls "$kdir"/boot/vmlinuz-* >/dev/null 2>&1; then
    echo "vmtest: fetching $pkg (a kernel package of 70-120 MB, up to 400 MB unpacked, kept in $cache;" \
      "KHAGENT_VMTEST_CACHE moves it)" >&2
    (cd "$cache" && rm -f "${pkg}"_*.deb && apt-get download -q -o APT::Sandbox::User=root "$pkg" >/dev/null) ||
      die "apt-get download $pkg failed"
    rm -rf "$kdir.tmp"
    dpkg-deb -x "$cache/${pkg}"_*.deb "$kdir.tmp"
    mv "$kdir.tmp" "$kdir"
  fi
  kernel=$(ls "$kdir"/boot/vmlinuz-* | head -1)
fi
[[ -r "$kernel" ]] || die "kernel image $kernel not readable"
if ((${#modules[@]})); then
  [[ -n "${kdir:-}" ]] || die "--modules and --disk need a Debian kernel (the default or --debian-suite), not --kernel"
  # /lib/modules, or /usr/lib/modules in a package built for merged /usr (trixie on)
  moddir=$(find "$kdir/lib/modules" "$kdir/usr/lib/modules" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | head -1 || true)
  [[ -n "$moddir" ]] || die "no modules in $kdir"
fi

# --- initramfs --------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/khagent-vmtest.XXXXXX")
trap 'rm -rf "$work"' EXIT
stage="$work/root"
mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,etc,run}

is_elf() { head -c4 "$1" | grep -q ELF; }
put() {  # put FILE: copy to the same absolute path, debug info stripped
  local f="$1" dst="$stage$1"
  [[ -e "$dst" ]] && return 0
  mkdir -p "$(dirname "$dst")"
  cp -L "$f" "$dst"
  if is_elf "$dst"; then
    objcopy --strip-debug "$dst" 2>/dev/null || true
  fi
}
put_with_libs() {
  local f abs
  abs=$(realpath -s "$1")
  f=$(readlink -f "$1")
  [[ -r "$f" ]] || die "cannot include $1"
  put "$abs"
  # Scripts and data files have no libraries (ldd fails on them).
  is_elf "$f" || return 0
  { ldd "$f" 2>/dev/null || true; } | awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}' |
    while read -r lib; do put "$lib"; done
}

put_with_libs "$(command -v bpftool || echo /usr/sbin/bpftool)"

# Kernel modules: each one's file (decompressed: busybox's insmod reads
# plain ELF), after the modules its .modinfo says it depends on; built-in
# ones (modules.builtin) are skipped. The guest loads them in this order.
loaded=" "
add_module() {  # add_module NAME
  local name="${1//-/_}" f deps d
  [[ "$loaded" == *" $name "* ]] && return 0
  if grep -qE "/${name//_/[-_]}\.ko\$" "$moddir/modules.builtin" 2>/dev/null; then
    loaded+="$name "
    return 0
  fi
  f=$(find "$moddir/kernel" -regextype posix-extended -regex ".*/${name//_/[-_]}\.ko(\.xz|\.zst|\.gz)?" | head -1)
  [[ -n "$f" ]] || die "module $1 is neither in $moddir nor built in"
  mkdir -p "$stage/lib/vmtest-modules"
  case "$f" in
    *.xz) xz -dc "$f" >"$work/$name.ko" ;;
    *.zst) zstd -qdc "$f" >"$work/$name.ko" ;;
    *.gz) gzip -dc "$f" >"$work/$name.ko" ;;
    *) cp "$f" "$work/$name.ko" ;;
  esac
  deps=$(objcopy -O binary --only-section=.modinfo "$work/$name.ko" /dev/stdout | tr '\0' '\n' |
         sed -n 's/^depends=//p' | tr ',' ' ')
  loaded+="$name "
  for d in $deps; do add_module "$d"; done
  mv "$work/$name.ko" "$stage/lib/vmtest-modules/$name.ko"
  echo "$name" >>"$stage/lib/vmtest-modules/order"
}
for m in "${modules[@]}"; do add_module "$m"; done
for f in "${includes[@]}"; do put_with_libs "$f"; done
# busybox for everything else (real tools copied above take precedence)
cp /bin/busybox "$stage/bin/busybox"
for applet in $(/bin/busybox --list); do
  [[ -e "$stage/bin/$applet" || -e "$stage/usr/bin/$applet" || -e "$stage/usr/sbin/$applet" ]] ||
    ln -s busybox "$stage/bin/$applet"
done

printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$stage/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$stage/etc/group"

# The commands, quoted for the guest's sh; each one's status is printed and
# the first non-zero one is the guest's.
{
  printf '#!/bin/sh\nrc=0\n'
  cmd=()
  n=0
  emit() {
    n=$((n + 1))
    printf 'printf "%%s\\n" %q\n' "vmtest: command $n: ${cmd[*]}"
    printf '%q ' "${cmd[@]}"
    printf '\ns=$?\necho "vmtest: command %d exited $s"\n[ $rc -ne 0 ] || rc=$s\n' "$n"
    # Whatever the command left running (a crashed test's children) must not
    # run into the next one: every process but init and this script.
    printf 'kill -9 -1 2>/dev/null\nsleep 0.2\n'
  }
  for a in "$@"; do
    if [[ "$a" == --and ]]; then
      ((${#cmd[@]})) || die "--and with no command before it"
      emit
      cmd=()
    else
      cmd+=("$a")
    fi
  done
  ((${#cmd[@]})) || die "--and with no command after it"
  emit
  printf 'exit $rc\n'
} >"$stage/vmtest-cmd"
chmod +x "$stage/vmtest-cmd"
if ((hybrid)); then : >"$stage/vmtest-hybrid"; fi
if ((disk)); then echo "$disk" >"$stage/vmtest-disk"; fi

cat >"$stage/init" <<'INIT'
#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts
mount -t devpts devpts /dev/pts
# / is the initramfs (in RAM, writable): /tmp needs no mount of its own, and
# one would hide binaries included from a build directory under /tmp.
mkdir -p /tmp
if [ -e /vmtest-hybrid ]; then
  mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
  mkdir /sys/fs/cgroup/unified /sys/fs/cgroup/cpu,cpuacct /sys/fs/cgroup/cpuset
  mount -t cgroup2 cgroup2 /sys/fs/cgroup/unified
  mount -t cgroup -o cpu,cpuacct cgroup /sys/fs/cgroup/cpu,cpuacct
  mount -t cgroup -o cpuset cgroup /sys/fs/cgroup/cpuset
else
  mount -t cgroup2 cgroup2 /sys/fs/cgroup
fi
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
if [ -f /lib/vmtest-modules/order ]; then
  for m in $(cat /lib/vmtest-modules/order); do
    # brd with the disk's size, below
    [ -e /vmtest-disk ] && [ "$m" = brd ] && continue
    insmod /lib/vmtest-modules/$m.ko || echo "vmtest: cannot load module $m"
  done
fi
if [ -e /vmtest-disk ]; then
  # One RAM disk of the size asked (brd's rd_size is in KiB), ext2 (busybox
  # makes no ext4) mounted through the ext4 driver.
  mib=$(cat /vmtest-disk)
  # devtmpfs makes the device node a moment after the module is in.
  insmod /lib/vmtest-modules/brd.ko rd_nr=1 rd_size=$((mib * 1024)) max_part=0
  for i in 1 2 3 4 5 6 7 8 9 10; do [ -b /dev/ram0 ] && break; sleep 0.2; done
  if [ -b /dev/ram0 ] && mke2fs -q /dev/ram0 >/dev/null && mkdir -p /var/tmp && mount -t ext4 /dev/ram0 /var/tmp; then
    echo "vmtest: /var/tmp is a ${mib} MiB RAM disk (brd, ext2 through the ext4 driver)"
  else
    echo "vmtest: cannot make the ${mib} MiB disk for /var/tmp"
  fi
fi
# Loopback only (the VM has no network device): tests serve emulated peers on it.
ip link set lo up || ifconfig lo 127.0.0.1 up
[ -e /vmtest-hybrid ] || echo "+cpu +cpuset +memory" > /sys/fs/cgroup/cgroup.subtree_control
[ -e /vmtest-hybrid ] || echo "+io" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
# Fewer flips of kernel code, each a chance of the TCG fault described at
# the top. The kernel turns some static keys on with the first user of a
# feature and off with the last: cpusets_enabled() (the page allocator) with
# the first non-root cpuset, cfs_bandwidth_used() (the scheduler) with the
# first CPU quota. A cgroup kept for the guest's life, empty, with a quota,
# holds both on. A tracepoint's static key flips with its first probe, and
# its call sites are re-pointed between one probe and several: two probes
# kept on each tracepoint the agent attaches to (the same event enabled in
# two tracing instances, with their buffers off) mean an attach or detach
# only changes the list of probes. The guest boots with one CPU online
# (maxcpus=1) and brings the others up after these flips: code patched
# while no other vCPU runs cannot be stale in one.
if [ -e /vmtest-hybrid ]; then
  mkdir /sys/fs/cgroup/cpu,cpuacct/vmtest-static-keys /sys/fs/cgroup/cpuset/vmtest-static-keys
  echo 100000 > /sys/fs/cgroup/cpu,cpuacct/vmtest-static-keys/cpu.cfs_quota_us
else
  mkdir /sys/fs/cgroup/vmtest-static-keys
  echo "100000 100000" > /sys/fs/cgroup/vmtest-static-keys/cpu.max
fi
if [ -d /sys/kernel/tracing/events/sched ]; then
  mkdir -p /sys/kernel/tracing/instances/vmtest-static-keys
  for t in /sys/kernel/tracing /sys/kernel/tracing/instances/vmtest-static-keys; do
    echo 0 > $t/tracing_on
    for e in sched/sched_switch sched/sched_wakeup sched/sched_wakeup_new sched/sched_migrate_task cgroup/cgroup_rmdir; do
      echo 1 > $t/events/$e/enable
    done
  done
fi
for c in /sys/devices/system/cpu/cpu[0-9]*; do
  [ -f $c/online ] && [ "$(cat $c/online)" = 0 ] && echo 1 > $c/online
done
if [ -e /vmtest-hybrid ]; then
  echo "vmtest: kernel $(uname -r), $(nproc) CPUs, hybrid cgroups: $(grep cgroup /proc/mounts | cut -d' ' -f2,3 | tr '\n' ' ')"
else
  echo "vmtest: kernel $(uname -r), $(nproc) CPUs, controllers: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
fi
cd /tmp
# Tests may relax what emulation makes slow (each BPF handler takes µs under TCG).
export KHAGENT_VMTEST=1
/vmtest-cmd
rc=$?
echo "KHAGENT-VMTEST-EXIT=$rc"
sync
poweroff -f
INIT
chmod +x "$stage/init"
(cd "$stage" && find . | cpio -o -H newc --quiet) | gzip -1 >"$work/initramfs.gz"

# --- boot -------------------------------------------------------------------
# A guest that locks up in code patching is booted again, at most twice (see
# the note on retries at the top); anything else ends the run.
log="${log:-$cache/console.log}"
tcg_patching_lockup() {  # the console of a guest that hung as described above
  { grep -qE 'soft lockup|detected stalls? on CPU' "$1" &&
      grep -qE 'smp_call_function_many_cond|asm_exc_int3|text_poke' "$1"; } ||
    # The same fault in other forms (seen on 6.12): the stale INT3 taken as
    # an oops in the scheduler's wake-up path instead of a stall, or an oops
    # whose trapping instruction starts one byte into a 5-byte NOP, the shape
    # of a static-key site (0f 1f 44 00 00): only a stale INT3 written over
    # its first byte leaves the CPU there (seen in the page allocator).
    grep -qE 'Oops: int3' "$1" ||
    grep -qE 'Code: .* 0f <1f> 44 00 00' "$1"
}
attempt=1
while :; do
  : >"$log"
  echo "vmtest: booting $(basename "$kernel") ($(du -h "$work/initramfs.gz" | cut -f1) initramfs), console in $log" >&2
  start=$(date +%s)
  set +e
  timeout --kill-after=10 "$timeout" qemu-system-x86_64 \
    -accel tcg -cpu "$cpu" -smp "2,maxcpus=$maxcpus" -m "$mem" \
    -kernel "$kernel" -initrd "$work/initramfs.gz" \
    -append "console=ttyS0 panic=-1 oops=panic loglevel=5 rdinit=/init maxcpus=1 softlockup_panic=1 sysctl.kernel.panic_on_rcu_stall=1${append:+ $append}" \
    -display none -monitor none -serial "file:$log" -no-reboot -nic none
  qrc=$?
  set -e
  elapsed=$(($(date +%s) - start))
  status=$(tr -d '\r' <"$log" | sed -n 's/^KHAGENT-VMTEST-EXIT=\([0-9]*\)$/\1/p' | tail -1)
  if [[ -z "$status" ]] && ((attempt < 3)) && tcg_patching_lockup "$log"; then
    cp "$log" "$log.attempt$attempt"
    echo "vmtest: attempt $attempt: the guest locked up in kernel code patching after ${elapsed}s" \
      "(the TCG fault described in vmtest/run.sh, not a test result; console kept in $log.attempt$attempt);" \
      "booting again" >&2
    attempt=$((attempt + 1))
    continue
  fi
  break
done

# Guest output (less the kernel's) for the caller.
grep -v '^\[ *[0-9]*\.[0-9]*\]' "$log" | tr -d '\r' || true
if [[ -z "$status" ]]; then
  if ((qrc == 124 || qrc == 137)); then
    echo "vmtest: FAILED: timed out after ${timeout}s; console log: $log" >&2
  else
    echo "vmtest: FAILED: the guest ended without an exit status (panic or crash?); last console lines:" >&2
    tail -25 "$log" >&2
  fi
  exit 1
fi
echo "vmtest: guest command exited $status after ${elapsed}s$( ((attempt > 1)) && echo " (attempt $attempt)")" >&2
exit "$status"
