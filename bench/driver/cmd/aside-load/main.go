// Command aside-load is the bench's load driver: one step of load at a
// constant rate, configured from the environment (see README.md). SIGINT
// or SIGTERM ends the schedule early and still writes the summary.
// The signal handling below is aside-core's too (core-go/cmd/aside-core), by
// design: the two are separate Go modules and neither imports the other.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one kills at once.
		<-ctx.Done()
		stop()
	}()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "aside-load: "+strings.Join(strings.Fields(err.Error()), " "))
		os.Exit(exitCode(err))
	}
}
