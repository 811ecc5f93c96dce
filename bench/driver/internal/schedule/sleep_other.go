//go:build !linux

package schedule

import "time"

// holdSleep is an ordinary sleep where no raw nanosleep is at hand.
func holdSleep(d time.Duration) { time.Sleep(d) }
