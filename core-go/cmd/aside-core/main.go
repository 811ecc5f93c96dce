// Command aside-core is Aside's Go core: writes, cache invalidation and CPU
// compute behind the gateway. Configuration is read from the environment
// (see README.md); SIGINT or SIGTERM drains in-flight requests and exits.
// The signal handling below is aside-load's too (bench/driver/cmd/aside-load),
// by design: the two are separate Go modules and neither imports the other.
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
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "aside-core: "+strings.Join(strings.Fields(err.Error()), " "))
		os.Exit(1)
	}
}
