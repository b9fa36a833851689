package rendezvous

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/strata-gnn/strata/comm/auth"
)

// JoinEnv joins the store of env the way comm/dist and comm/devdist do:
// with sec, or the security the environment configures when sec is nil
// (auth.FromEnv). It returns the store and the security in use, which
// the TCP back end needs too.
func JoinEnv(ctx context.Context, env Env, sec *auth.Security) (Store, auth.Security, error) {
	var s auth.Security
	if sec != nil {
		s = *sec
	} else {
		var err error
		if s, err = auth.FromEnv(); err != nil {
			return nil, s, err
		}
	}
	store, err := Join(ctx, env, Options{Security: s})
	return store, s, err
}

// SameHost reports whether every rank of store runs on this host: each
// rank publishes its boot id and host name under prefix/host/RANK and
// compares them with everyone's.
func SameHost(ctx context.Context, store Store, prefix string) (bool, error) {
	id := hostID()
	if err := store.Set(ctx, prefix+"/host/"+strconv.Itoa(store.Rank()), []byte(id)); err != nil {
		return false, err
	}
	ids := make([]string, store.Size())
	for r := range ids {
		v, err := store.Get(ctx, prefix+"/host/"+strconv.Itoa(r))
		if err != nil {
			return false, fmt.Errorf("rank %d never said which host it is on: %w", r, err)
		}
		ids[r] = string(v)
	}
	return !slices.ContainsFunc(ids, func(s string) bool { return s != id }), nil
}

func hostID() string {
	name, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(boot)) + "/" + name
}

// AdvertiseHost picks the address a TCP back end advertises to its peers:
// explicit if set, else STRATA_COMM_HOST, else loopback when the master
// is on loopback, else the local address of the interface that routes to
// the master.
func AdvertiseHost(explicit string, env Env) string {
	if explicit != "" {
		return explicit
	}
	if h := os.Getenv("STRATA_COMM_HOST"); h != "" {
		return h
	}
	if auth.IsLoopback(env.MasterAddr) {
		return "127.0.0.1"
	}
	c, err := net.Dial("udp", env.Addr()) // no packet is sent
	if err != nil {
		return "0.0.0.0"
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}
