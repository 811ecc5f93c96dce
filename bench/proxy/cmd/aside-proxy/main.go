// Command aside-proxy is toxiproxy's server with one more toxic, latency_us
// (internal/lagtoxic): the proxies on the lab's hops and the toxics that set
// their network distance and their gray failures.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"aside/bench/proxy/internal/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "aside-proxy:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return server.Run(ctx, args, getenv, stdout)
}
