package auth

import (
	"errors"
	"fmt"
	"os"
)

// Environment variables read by FromEnv.
const (
	EnvSecret  = "STRATA_COMM_SECRET"   // shared secret (any non-empty string)
	EnvTLSCert = "STRATA_COMM_TLS_CERT" // PEM certificate of this endpoint
	EnvTLSKey  = "STRATA_COMM_TLS_KEY"  // its PEM private key
	EnvTLSCA   = "STRATA_COMM_TLS_CA"   // PEM CA that signed every peer
	EnvTLSName = "STRATA_COMM_TLS_NAME" // name in the peers' certificates ("strata")
)

// FromEnv builds a Security from the environment: a secret from
// STRATA_COMM_SECRET, and mutual TLS when STRATA_COMM_TLS_CERT, _KEY and
// _CA name files (all three or none).
func FromEnv() (Security, error) {
	var s Security
	if v := os.Getenv(EnvSecret); v != "" {
		s.Secret = []byte(v)
	}
	cert, key, ca := os.Getenv(EnvTLSCert), os.Getenv(EnvTLSKey), os.Getenv(EnvTLSCA)
	if cert == "" && key == "" && ca == "" {
		return s, nil
	}
	if cert == "" || key == "" || ca == "" {
		return Security{}, errors.New("auth: set all of " + EnvTLSCert + ", " + EnvTLSKey + " and " + EnvTLSCA + " for mutual TLS")
	}
	read := func(name, path string) ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("auth: %s: %w", name, err)
		}
		return b, nil
	}
	cb, err := read(EnvTLSCert, cert)
	if err != nil {
		return Security{}, err
	}
	kb, err := read(EnvTLSKey, key)
	if err != nil {
		return Security{}, err
	}
	ab, err := read(EnvTLSCA, ca)
	if err != nil {
		return Security{}, err
	}
	cfg, err := MutualTLS(cb, kb, ab, os.Getenv(EnvTLSName))
	if err != nil {
		return Security{}, err
	}
	s.TLS = cfg
	return s, nil
}
