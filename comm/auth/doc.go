// Package auth holds what the TCP transport and the rendezvous store share:
// peer authentication (mutual TLS, or a shared secret with an HMAC
// challenge-response in both directions), the rule of what is required
// where, and the accept loop both listeners use.
//
// # What is required
//
// When every address involved (MASTER_ADDR, the addresses the TCP ranks
// advertise) is on loopback, nothing is: a job on one machine (and CI)
// runs as is, and STRATA_COMM_SECRET still keeps other local users'
// processes out. Off loopback, mutual TLS (TLS 1.3, every process
// presents a certificate signed by the job's CA and checks the peer's) is
// required; a process configured without it refuses to start, naming the
// variables to set. On a network you trust, STRATA_COMM_SECRET together
// with STRATA_COMM_INSECURE_TRUSTED_NETWORK=1 does instead: peers are
// authenticated at connect but nothing protects the traffic afterwards,
// and every process that relies on it prints a warning to stderr.
//
// # Configuration
//
// FromEnv (used by comm/dist and comm/devdist) reads
//
//	STRATA_COMM_TLS_CERT   PEM certificate of this process (client and server use)
//	STRATA_COMM_TLS_KEY    its PEM private key
//	STRATA_COMM_TLS_CA     PEM certificate of the CA that signed every process's certificate
//	STRATA_COMM_TLS_NAME   the DNS name in the certificates ("strata" if unset)
//	STRATA_COMM_SECRET     shared secret (any string, the same everywhere)
//	STRATA_COMM_INSECURE_TRUSTED_NETWORK=1   accept the secret alone off loopback
//
// 'strata launch' sets them for its ranks from --tls-cert, --tls-key,
// --tls-ca, --tls-name and --insecure-trusted-network (Config.Env), and
// checks them before starting any rank when --master-addr is not on
// loopback. In Go, set the fields of Security (comm/dist's
// Options.Security), with MutualTLS building the TLS part.
//
// # Making certificates
//
// One CA per job (or cluster); every process may share one certificate
// whose DNS name is "strata" (or STRATA_COMM_TLS_NAME):
//
//	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
//	    -keyout ca.key -out ca.pem -subj /CN=strata-ca
//	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
//	    -keyout node.key -out node.csr -subj /CN=strata
//	printf 'subjectAltName=DNS:strata\nextendedKeyUsage=serverAuth,clientAuth\n' > ext.cnf
//	openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
//	    -extfile ext.cnf -out node.pem
//	export STRATA_COMM_TLS_CERT=node.pem STRATA_COMM_TLS_KEY=node.key STRATA_COMM_TLS_CA=ca.pem
//
// (NewTestPKI does the same in Go, for tests.) Keep ca.key off the
// training machines.
package auth
