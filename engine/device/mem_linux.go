package device

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// machineMemory returns the machine's physical memory in bytes (MemTotal),
// or 0 if it cannot be read.
func machineMemory() uint64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}

// HostLimit returns the memory this process may use in all: the machine's
// memory, or the memory limit of its cgroup (a container's, a systemd
// slice's) when that is lower. 0 if neither can be read.
func HostLimit() uint64 {
	total := machineMemory()
	if max, _, ok := cgroupMemory(); ok && (total == 0 || max < total) {
		return max
	}
	return total
}

// HostAvailable returns the memory that can be taken now without pushing
// the machine into swap or its OOM killer: MemAvailable of /proc/meminfo,
// or what is left under the cgroup's limit when that is less. It reads two
// or three small files (about 10–30 µs); 0 and false if none can be read.
func HostAvailable() (uint64, bool) {
	avail, ok := memAvailable()
	if max, cur, cok := cgroupMemory(); cok {
		left := uint64(0)
		if cur < max {
			left = max - cur
		}
		if !ok || left < avail {
			avail, ok = left, true
		}
	}
	return avail, ok
}

// memAvailable reads MemAvailable from /proc/meminfo.
func memAvailable() (uint64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("MemAvailable:"))
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(string(rest)), " kB"), 10, 64)
		if err != nil {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// cgroupMemory returns the memory limit and current usage of this
// process's cgroup (v2: memory.max and memory.current; v1:
// memory.limit_in_bytes and memory.usage_in_bytes), and false when there
// is no limit or it cannot be read.
func cgroupMemory() (max, cur uint64, ok bool) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var limitFile, usageFile string
		var roots []string
		switch {
		case parts[0] == "0" && parts[1] == "": // v2
			limitFile, usageFile, roots = "memory.max", "memory.current", []string{"/sys/fs/cgroup"}
		case strings.Contains(","+parts[1]+",", ",memory,"): // v1
			limitFile, usageFile, roots = "memory.limit_in_bytes", "memory.usage_in_bytes", []string{"/sys/fs/cgroup/memory"}
		default:
			continue
		}
		// The cgroup's own directory; inside a container without a
		// cgroup namespace the path is the host's, and the container's
		// cgroup is mounted at the root instead.
		for _, dir := range []string{filepath.Join(roots[0], parts[2]), roots[0]} {
			max, ok := readBytesFile(filepath.Join(dir, limitFile))
			if !ok {
				continue
			}
			// v1 says "no limit" with a huge number (page-rounded MaxInt64),
			// v2 with "max" (not a number: not ok above).
			if max >= 1<<62 {
				break
			}
			cur, _ := readBytesFile(filepath.Join(dir, usageFile))
			return max, cur, true
		}
	}
	return 0, 0, false
}

// readBytesFile reads a cgroup file holding one number of bytes; "max"
// (no limit) and anything unreadable are false.
func readBytesFile(path string) (uint64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return n, err == nil
}
