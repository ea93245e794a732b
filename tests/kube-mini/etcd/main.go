// SPDX-License-Identifier: Apache-2.0

// Command etcd runs a single-member etcd server (go.etcd.io/etcd/server/v3
// embedded) for the kube tier's kube-apiserver: one data directory, client
// and peer URLs on loopback. It prints
//
//	kube-mini etcd ready: client=URL
//
// on standard output once the member serves, and closes the server cleanly
// on SIGTERM or SIGINT (exit status 0).
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func parseURLs(name, value string) []url.URL {
	var urls []url.URL
	for _, s := range strings.Split(value, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.Host == "" {
			fmt.Fprintf(os.Stderr, "etcd: --%s: bad URL %q\n", name, s)
			os.Exit(2)
		}
		urls = append(urls, *u)
	}
	return urls
}

func main() {
	dataDir := flag.String("data-dir", "", "data directory (required)")
	clientURLs := flag.String("listen-client-urls", "http://127.0.0.1:2379", "comma-separated client URLs, also advertised")
	peerURLs := flag.String("listen-peer-urls", "http://127.0.0.1:2380", "comma-separated peer URLs, also advertised")
	name := flag.String("name", "kube-mini", "member name")
	noFsync := flag.Bool("unsafe-no-fsync", false, "skip fsync (a throwaway test store: faster, not crash-safe)")
	logLevel := flag.String("log-level", "warn", "debug, info, warn or error")
	readyTimeout := flag.Duration("ready-timeout", 60*time.Second, "give up if the member is not serving by then")
	flag.Parse()
	if *dataDir == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: etcd --data-dir DIR [--listen-client-urls URLS] [--listen-peer-urls URLS] [--unsafe-no-fsync]")
		os.Exit(2)
	}

	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = parseURLs("listen-client-urls", *clientURLs)
	cfg.AdvertiseClientUrls = cfg.ListenClientUrls
	cfg.ListenPeerUrls = parseURLs("listen-peer-urls", *peerURLs)
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = *noFsync
	cfg.LogLevel = *logLevel
	cfg.LogOutputs = []string{"stderr"}

	// Registered before the server starts, so that a SIGTERM sent while it
	// starts is not lost.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: start: %v\n", err)
		os.Exit(1)
	}
	select {
	case <-e.Server.ReadyNotify():
		fmt.Printf("kube-mini etcd ready: client=%s\n", cfg.AdvertiseClientUrls[0].String())
	case sig := <-signals:
		fmt.Fprintf(os.Stderr, "etcd: %v before ready, stopping\n", sig)
		e.Close()
		return
	case <-time.After(*readyTimeout):
		fmt.Fprintf(os.Stderr, "etcd: not ready after %v\n", *readyTimeout)
		e.Close()
		os.Exit(1)
	}

	select {
	case sig := <-signals:
		fmt.Fprintf(os.Stderr, "etcd: %v, stopping\n", sig)
		e.Close()
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		e.Close()
		os.Exit(1)
	}
}
