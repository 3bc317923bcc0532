package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// defaultCACert is where devmsg serve, run with the default data_dir from
// the same folder, keeps the self-signed certificate it makes.
var defaultCACert = filepath.Join("data", "tls", "cert.pem")

// cacertUsage is the --cacert flag's help, the same for events and sim.
const cacertUsage = "PEM file of a certificate to trust besides the system's (default: " +
	"data/tls/cert.pem when it exists, the self-signed certificate of a devmsg serve run from this folder)"

// clientTLS is the TLS configuration of the client subcommands: the
// system's roots plus cacert (or defaultCACert when cacert is "" and the
// file exists), or no check at all with insecure.
func clientTLS(cacert string, insecure bool) (*tls.Config, error) {
	if insecure {
		return &tls.Config{InsecureSkipVerify: true}, nil //nolint:gosec // only when asked for
	}
	if cacert == "" {
		if _, err := os.Stat(defaultCACert); err != nil {
			return &tls.Config{}, nil
		}
		cacert = defaultCACert
	}
	pem, err := os.ReadFile(cacert)
	if err != nil {
		return nil, fmt.Errorf("--cacert: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--cacert %s: no PEM certificate in it", cacert)
	}
	return &tls.Config{RootCAs: pool}, nil
}

// isCertError reports whether err is the server's certificate failing
// verification: retrying cannot help, the trust has to change. paho
// (devmsg sim's MQTT) flattens the error into text, hence the text check.
func isCertError(err error) bool {
	var v *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &v) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) {
		return true
	}
	return err != nil && (strings.Contains(err.Error(), "tls: failed to verify certificate") || strings.Contains(err.Error(), "x509: "))
}

// certHint says what to do about a certificate the client does not trust.
const certHint = "the server's certificate is not trusted. For devmsg serve's self-signed certificate pass " +
	"--cacert DATA_DIR/tls/cert.pem (data/tls/cert.pem is used by default when it exists in this folder); " +
	"for a throwaway test server --insecure skips the check"
