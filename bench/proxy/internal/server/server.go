// Package server runs toxiproxy's API and proxies, as toxiproxy's own
// cmd/server does, with the latency_us toxic registered.
package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/Shopify/toxiproxy/v2"

	"aside/bench/proxy/internal/lagtoxic"
)

// Options are the command's flags, toxiproxy-server's names.
type Options struct {
	Host    string
	Port    string
	Config  string
	Version bool
}

// Parse reads the flags; a wrong one is an error naming it.
func Parse(args []string) (Options, error) {
	var o Options
	flags := flag.NewFlagSet("aside-proxy", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	flags.StringVar(&o.Host, "host", "127.0.0.1", "host for the API to listen on")
	flags.StringVar(&o.Port, "port", "8474", "port for the API to listen on")
	flags.StringVar(&o.Config, "config", "", "JSON file of the proxies to create on start")
	flags.BoolVar(&o.Version, "version", false, "print toxiproxy's version")
	if err := flags.Parse(args); err != nil {
		return o, err
	}
	return o, nil
}

// logger writes toxiproxy's log at LOG_LEVEL (info when unset).
func logger(getenv func(string) string, out io.Writer) (zerolog.Logger, error) {
	log := zerolog.New(out).With().Timestamp().Logger()
	name := strings.TrimSpace(getenv("LOG_LEVEL"))
	if name == "" {
		return log, nil
	}
	level, err := zerolog.ParseLevel(name)
	if err != nil {
		return log, fmt.Errorf("LOG_LEVEL must be one of trace, debug, info, warn, error, got %q", name)
	}
	return log.Level(level), nil
}

// Run serves the API until ctx ends, then shuts the proxies down.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	o, err := Parse(args)
	if err != nil {
		return err
	}
	if o.Version {
		_, err := fmt.Fprintf(stdout, "toxiproxy-server version %s\n", toxiproxy.Version)
		return err
	}
	log, err := logger(getenv, stdout)
	if err != nil {
		return err
	}
	lagtoxic.Register()
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), log)
	if o.Config != "" {
		api.PopulateConfig(o.Config)
	}
	failed := make(chan error, 1)
	go func() { failed <- api.Listen(net.JoinHostPort(o.Host, o.Port)) }()
	select {
	case <-ctx.Done():
	case err := <-failed:
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("the API stopped: %w", err)
		}
	}
	return api.Shutdown()
}
