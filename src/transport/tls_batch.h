/* tls_batch.c: a TLS session's write BIO that gathers the records of one event into one write(2), and its read BIO
 * that takes a bounded share of the socket per event. Used by tls.c only. */
#ifndef CB_TLS_BATCH_H
#define CB_TLS_BATCH_H

#include <openssl/bio.h>
#include <openssl/ssl.h>

/* A write BIO over the socket fd for the session ssl, holding small records of data and TLS 1.3 session tickets
 * until cb__tls_batch_push. NULL: no memory. */
BIO *cb__tls_batch_new(const SSL *ssl, int fd);
/* Writes what bio holds, as far as the socket takes it, then the FIN once asked for (cb__tls_batch_fin) and all
 * is out, unless closing (close(2) is the next call and sends it). 1: bytes still wait for the socket to be writable; 0: none wait (also when bio is no batch); or a
 * negative UV_E* error of the socket (the peer reset it). */
int cb__tls_batch_push(BIO *bio, int closing);
/* The sending side is shut down once what bio holds is out (at a push). 1, or 0 when bio is no batch: the caller
 * shuts the socket down itself. */
int cb__tls_batch_fin(BIO *bio);

/* A read BIO over the socket fd that takes at most the budget it was last given (cb__tls_reader_budget) from the
 * socket, then asks to be retried. NULL: no memory. */
BIO *cb__tls_reader_new(int fd);
/* This event may take n bytes from the socket through bio (nothing happens when bio is no reader). */
void cb__tls_reader_budget(BIO *bio, size_t n);

#endif
