package schedule

import (
	"syscall"
	"time"
	"unsafe"
)

// holdSleep sleeps d in a raw nanosleep: the goroutine keeps its P, so the
// process does not look idle to the runtime between two ticks. Otherwise
// the runtime's monitor thread deep-sleeps whenever every P is idle and,
// woken by the next syscall, polls every 20 µs for a while: at a few
// thousand requests a second that costs about a third of the driver's CPU.
// A raw nanosleep is also not rounded up to epoll's whole milliseconds.
// A signal (the runtime's preemption) only ends it early.
func holdSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
}
