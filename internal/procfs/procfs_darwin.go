//go:build darwin

package procfs

import "golang.org/x/sys/unix"

// Process states of darwin's kinfo_proc (p_stat, sys/proc.h).
const (
	darwinIdle   = 1 // SIDL: being made by fork
	darwinRun    = 2 // SRUN
	darwinSleep  = 3 // SSLEEP
	darwinStop   = 4 // SSTOP
	darwinZombie = 5 // SZOMB
)

// List returns the processes of this machine this user may see. Their
// CPU is not known on darwin (zero).
func List() []Process {
	kps, err := unix.SysctlKinfoProcSlice("kern.proc.all")
	if err != nil {
		return nil
	}
	out := make([]Process, 0, len(kps))
	for i := range kps {
		out = append(out, fromKinfo(&kps[i]))
	}
	return out
}

// Stat reads process pid, and reports whether it exists.
func Stat(pid int) (Process, bool) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil || int(kp.Proc.P_pid) != pid {
		return Process{}, false
	}
	return fromKinfo(kp), true
}

// fromKinfo is what kinfo_proc says of a process, its state letter as
// Linux's proc(5) names it.
func fromKinfo(kp *unix.KinfoProc) Process {
	state := byte('?')
	switch kp.Proc.P_stat {
	case darwinIdle, darwinRun:
		state = 'R'
	case darwinSleep:
		state = 'S'
	case darwinStop:
		state = 'T'
	case darwinZombie:
		state = 'Z'
	}
	return Process{
		PID: int(kp.Proc.P_pid), PPID: int(kp.Eproc.Ppid), PGID: int(kp.Eproc.Pgid),
		State: state, Zombie: state == 'Z', Nice: int(kp.Proc.P_nice),
	}
}

// Cmdline returns nil: darwin keeps a process's arguments in the
// kern.procargs2 sysctl, which nothing on darwin needs yet.
func Cmdline(int) []string { return nil }
