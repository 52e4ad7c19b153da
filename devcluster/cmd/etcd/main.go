// Command etcd runs a single-member etcd server for the devcluster through
// go.etcd.io/etcd/server/v3/embed. It listens on loopback only.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "directory for the etcd data (required)")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "client URL (loopback)")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL (loopback)")
	logLevel := flag.String("log-level", "warn", "zap log level")
	quotaBytes := flag.Int64("quota-backend-bytes", 2<<30, "backend size quota in bytes")
	flag.Parse()
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		os.Exit(2)
	}
	cu, err := url.Parse(*clientURL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: bad --listen-client-url: %v\n", err)
		os.Exit(2)
	}
	pu, err := url.Parse(*peerURL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: bad --listen-peer-url: %v\n", err)
		os.Exit(2)
	}

	cfg := embed.NewConfig()
	cfg.Name = "devcluster"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.LogLevel = *logLevel
	cfg.QuotaBackendBytes = *quotaBytes
	cfg.UnsafeNoFsync = true // a throwaway local test cluster: speed over durability

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: cannot start: %v\n", err)
		os.Exit(1)
	}
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("etcd: ready on", cu.String())
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		fmt.Fprintln(os.Stderr, "etcd: not ready after 60s")
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sig:
		fmt.Println("etcd: stopping on", s)
		e.Close()
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "etcd: failed: %v\n", err)
		os.Exit(1)
	}
}
