package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSelfSignedCertGeneratedOnceAndReused(t *testing.T) {
	dir := t.TempDir()
	cert, err := loadOrCreateCert(TLSConfig{Enabled: true}, dir)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}

	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("key is %T, want ECDSA P-256", leaf.PublicKey)
	}
	if life := time.Until(leaf.NotAfter); life < 9*365*24*time.Hour || life > 11*365*24*time.Hour {
		t.Errorf("valid until %v, want about ten years", leaf.NotAfter)
	}
	wantNames := []string{"localhost"}
	if h, err := os.Hostname(); err == nil && h != "" {
		wantNames = append(wantNames, h)
	}
	for _, n := range wantNames {
		if !slices.Contains(leaf.DNSNames, n) {
			t.Errorf("DNS SANs %v lack %q", leaf.DNSNames, n)
		}
	}
	for _, ip := range []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")} {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			t.Errorf("IP SANs %v lack %v", leaf.IPAddresses, ip)
		}
	}
	// Clients trust data_dir/tls/cert.pem directly, so it must verify as
	// its own root for every name it is served under.
	certPEM, err := os.ReadFile(filepath.Join(dir, "tls", "cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(certPEM) {
		t.Fatal("cert.pem holds no PEM certificate")
	}
	for _, name := range []string{"localhost", "127.0.0.1", "::1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "tls", "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("key.pem mode %v, want 0600", perm)
	}

	again, err := loadOrCreateCert(TLSConfig{Enabled: true}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Certificate[0], cert.Certificate[0]) {
		t.Error("second start generated a new certificate; clients that pinned the first would break")
	}
}

func TestConfiguredCertFiles(t *testing.T) {
	// A pair generated elsewhere stands in for an operator's certificate.
	other := t.TempDir()
	want, err := loadOrCreateCert(TLSConfig{}, other)
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	c := TLSConfig{
		Enabled:  true,
		CertFile: filepath.Join(other, "tls", "cert.pem"),
		KeyFile:  filepath.Join(other, "tls", "key.pem"),
	}
	got, err := loadOrCreateCert(c, dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Certificate[0], want.Certificate[0]) {
		t.Error("configured cert_file was not the certificate served")
	}
	if _, err := os.Stat(filepath.Join(dataDir, "tls")); !os.IsNotExist(err) {
		t.Errorf("generated a certificate although files are configured (stat: %v)", err)
	}

	c.KeyFile = filepath.Join(other, "missing.pem")
	if _, err := loadOrCreateCert(c, dataDir); err == nil || !strings.Contains(err.Error(), "http.tls") {
		t.Errorf("missing key_file: error %v, want one naming http.tls", err)
	}
}

// TestDamagedGeneratedCertIsAnError: a damaged cert.pem stops the start
// instead of being replaced, because silently changing the certificate
// breaks every client that trusts the old one.
func TestDamagedGeneratedCertIsAnError(t *testing.T) {
	dir := t.TempDir()
	if _, err := loadOrCreateCert(TLSConfig{}, dir); err != nil {
		t.Fatal(err)
	}
	certFile := filepath.Join(dir, "tls", "cert.pem")
	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadOrCreateCert(TLSConfig{}, dir); err == nil {
		t.Fatal("damaged cert.pem accepted")
	}
	if b, _ := os.ReadFile(certFile); string(b) != "not a certificate" {
		t.Error("damaged cert.pem was overwritten")
	}
}

// TestGeneratedCertIsNotACA: clients are told to trust cert.pem, so it
// must not be able to sign certificates for other names.
func TestGeneratedCertIsNotACA(t *testing.T) {
	dir := t.TempDir()
	cert, err := loadOrCreateCert(TLSConfig{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if leaf.IsCA || leaf.KeyUsage&x509.KeyUsageCertSign != 0 {
		t.Fatalf("generated certificate can sign others: IsCA=%v KeyUsage=%v", leaf.IsCA, leaf.KeyUsage)
	}
}
