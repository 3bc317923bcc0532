package secret

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
)

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// Alnum returns n characters drawn uniformly from [A-Za-z0-9] with crypto/rand.
func Alnum(n int) string {
	out := make([]byte, n)
	buf := make([]byte, n+n/2)
	for i := 0; i < n; {
		if _, err := rand.Read(buf); err != nil {
			panic("crypto/rand: " + err.Error()) // never fails on supported platforms
		}
		for _, b := range buf {
			// 248 = 4*62: reject the top values so every character is equally likely.
			if b < 248 && i < n {
				out[i] = alnum[int(b)%len(alnum)]
				i++
			}
		}
	}
	return string(out)
}

// Equal reports whether a and b are equal without leaking, through timing,
// where they differ or how long the expected value is.
func Equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}
