#ifndef HEADWAY_CGNUTLS_SHIM_H
#define HEADWAY_CGNUTLS_SHIM_H

// GnuTLS, the TLS library Debian's libmicrohttpd is built with: its CSPRNG and SHA-256
// (`gnutls_rnd`, `gnutls_hash_fast`) make token secrets and their hashes, and its
// certificate API lets the HTTPS daemon hand out a certificate reloaded on SIGHUP.
#include <gnutls/gnutls.h>
#include <gnutls/crypto.h>
#include <gnutls/abstract.h>
#include <gnutls/x509.h>

#endif
