package auth

import (
	"errors"
	"fmt"
	"os"
	"strconv"
)

// Environment variables read by FromEnv.
const (
	EnvSecret   = "STRATA_COMM_SECRET"                   // shared secret (any non-empty string)
	EnvTLSCert  = "STRATA_COMM_TLS_CERT"                 // PEM certificate of this endpoint
	EnvTLSKey   = "STRATA_COMM_TLS_KEY"                  // its PEM private key
	EnvTLSCA    = "STRATA_COMM_TLS_CA"                   // PEM CA that signed every peer
	EnvTLSName  = "STRATA_COMM_TLS_NAME"                 // name in the peers' certificates ("strata")
	EnvInsecure = "STRATA_COMM_INSECURE_TRUSTED_NETWORK" // 1: a secret without TLS will do off loopback
)

// Config is the security configuration as files and switches, the form
// flags and the environment give it.
type Config struct {
	Secret                 string
	TLSCert, TLSKey, TLSCA string // PEM files; all three or none
	TLSName                string // "" for "strata"
	InsecureTrustedNetwork bool
}

// ConfigFromLookup reads a Config from the variables above through lookup
// (os.LookupEnv for the environment).
func ConfigFromLookup(lookup func(string) (string, bool)) (Config, error) {
	get := func(k string) string { v, _ := lookup(k); return v }
	c := Config{Secret: get(EnvSecret), TLSCert: get(EnvTLSCert), TLSKey: get(EnvTLSKey), TLSCA: get(EnvTLSCA), TLSName: get(EnvTLSName)}
	if v := get(EnvInsecure); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return Config{}, fmt.Errorf("auth: %s=%q, want 1 or 0", EnvInsecure, v)
		}
		c.InsecureTrustedNetwork = b
	}
	return c, nil
}

// Env returns c as environment entries ("KEY=value") for a child process;
// empty settings are left out.
func (c Config) Env() []string {
	var e []string
	add := func(k, v string) {
		if v != "" {
			e = append(e, k+"="+v)
		}
	}
	add(EnvSecret, c.Secret)
	add(EnvTLSCert, c.TLSCert)
	add(EnvTLSKey, c.TLSKey)
	add(EnvTLSCA, c.TLSCA)
	add(EnvTLSName, c.TLSName)
	if c.InsecureTrustedNetwork {
		add(EnvInsecure, "1")
	}
	return e
}

// Security loads the files of c: mutual TLS when TLSCert, TLSKey and
// TLSCA are set (all three or none).
func (c Config) Security() (Security, error) {
	s := Security{InsecureTrustedNetwork: c.InsecureTrustedNetwork}
	if c.Secret != "" {
		s.Secret = []byte(c.Secret)
	}
	if c.TLSCert == "" && c.TLSKey == "" && c.TLSCA == "" {
		return s, nil
	}
	if c.TLSCert == "" || c.TLSKey == "" || c.TLSCA == "" {
		return Security{}, errors.New("auth: mutual TLS needs all three of --tls-cert, --tls-key and --tls-ca (" + EnvTLSCert + ", " + EnvTLSKey + ", " + EnvTLSCA + ")")
	}
	read := func(name, path string) ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("auth: %s: %w", name, err)
		}
		return b, nil
	}
	cb, err := read(EnvTLSCert, c.TLSCert)
	if err != nil {
		return Security{}, err
	}
	kb, err := read(EnvTLSKey, c.TLSKey)
	if err != nil {
		return Security{}, err
	}
	ab, err := read(EnvTLSCA, c.TLSCA)
	if err != nil {
		return Security{}, err
	}
	cfg, err := MutualTLS(cb, kb, ab, c.TLSName)
	if err != nil {
		return Security{}, fmt.Errorf("auth: %s, %s, %s: %w", c.TLSCert, c.TLSKey, c.TLSCA, err)
	}
	s.TLS = cfg
	return s, nil
}

// FromEnv builds a Security from the environment: a secret from
// STRATA_COMM_SECRET, mutual TLS when STRATA_COMM_TLS_CERT, _KEY and _CA
// name files (all three or none), and the trusted-network switch.
func FromEnv() (Security, error) {
	c, err := ConfigFromLookup(os.LookupEnv)
	if err != nil {
		return Security{}, err
	}
	return c.Security()
}
