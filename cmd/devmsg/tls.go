package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// loadOrCreateCert returns the configured certificate or, with none
// configured, the self-signed one in dataDir/tls, generating it on the
// first start so clients can pin it across restarts.
func loadOrCreateCert(c TLSConfig, dataDir string) (tls.Certificate, error) {
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return cert, fmt.Errorf("load http.tls cert: %w", err)
		}
		return cert, nil
	}
	dir := filepath.Join(dataDir, "tls")
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err == nil {
		return cert, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return cert, fmt.Errorf("load generated cert: %w", err)
	}
	certPEM, keyPEM, err := selfSigned()
	if err != nil {
		return cert, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return cert, fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return cert, fmt.Errorf("write key: %w", err)
	}
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return cert, fmt.Errorf("write cert: %w", err)
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// selfSigned makes an ECDSA P-256 certificate for localhost, the loopback
// addresses and this host's name, valid for ten years.
func selfSigned() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, err
	}
	names := []string{"localhost"}
	if h, err := os.Hostname(); err == nil && h != "" && h != "localhost" {
		names = append(names, h)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "devmsg self-signed", Organization: []string{"devmsg"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		// Not a CA: clients trust cert.pem itself as the anchor (Go, curl
		// and OpenSSL accept a self-signed leaf), and whoever reads
		// key.pem cannot mint certificates for other names they trust.
		IsCA:        false,
		DNSNames:    names,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}
