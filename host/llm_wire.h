/* llm_wire.h — what a wire format of rlm.core.llm (host/lllm.c) sees of a call: the call, the
 * request body being written and the answer's decoding helpers. lllm.c holds the OpenAI chat
 * completions and Anthropic messages wires; a wire of its own file (llm_responses.c) defines a
 * struct wire with these. */
#ifndef RLM_LLM_WIRE_H
#define RLM_LLM_WIRE_H

#include <lua.h>

#include "buf.h"
#include "json.h"
#include "loop.h"
#include "request.h"
#include "sse.h"

struct call;
struct body;

/* What one wire format (OpenAI chat completions, Anthropic messages, OpenAI responses) does
 * its own way. */

struct wire {
    const char *name;
    const char *auth_prefix;        /* the header line the key follows */
    const char *version_header;     /* NULL: none */
    /* Writes messages (and the system prompt, and max_tokens and stop) into the body: from
     * the list at msgs, or when msgs is 0 from the one user prompt at prompt. */
    void (*build)(struct body *b, struct call *k, int req, int msgs, int prompt);
    int (*ends_stream)(const char *event, const char *data, size_t len);
    /* Read one stream event, or a whole response body; 0 when it is not valid JSON. */
    int (*event)(struct call *k, const char *data, size_t len, char *err, size_t errlen);
    int (*whole)(struct call *k, const char *data, size_t len, char *err, size_t errlen);
    const char *const (*finish_words)[2];                        /* its stop reasons -> OpenAI's */
};

struct call {
    loop *lp;
    lua_Integer id;
    const struct wire *wire;
    struct request *req;
    struct curl_slist *headers;
    struct buf body;                /* the request JSON */
    char *url, *name, *secret;
    int stream;
    double timeout_s;
    /* The current attempt's stream: */
    int sniffed, sse_mode, notified, terminal;
    struct sse sse;
    struct buf events;              /* queued events: size_t len, event, NUL, size_t len, data */
    /* What the response said so far: */
    struct buf text;
    struct buf refusal;             /* OpenAI's message.refusal: the model declined */
    char model[160], finish[40];
    lua_Integer input_tokens, output_tokens;   /* as the wire reports them */
    lua_Integer cache_read, cache_write;       /* input read from / written to a prompt cache */
    char failure[600];              /* a final error found while decoding */
    const char *failure_kind;
};

/* The request body, written as JSON straight into the call's buffer member by member (a table
 * of it, encoded, cost as much again). req.extra is merged last and wins: a member it also
 * names is left out where the body would have it. Member names here are plain ASCII. */
struct body {
    lua_State *L;
    struct buf *out;
    int extra;      /* req.extra's stack slot, 0 when there is none */
};

/* OpenAI's Responses API (llm_responses.c). */
extern const struct wire LLM_RESPONSES;

/* ---------- writing the body (Lua context; raise on misuse) ---------- */
void body_add(struct body *b, const char *s, size_t n);
/* Writes the value at idx as JSON. */
void body_value(struct body *b, int idx);
/* Starts member key: 0 when req.extra names it instead (the caller then writes nothing). */
int body_key(struct body *b, const char *key);
/* Pops the value on top of the stack into member key. */
void put_member(struct body *b, const char *key);
/* req.max_tokens, or -1 when unset. */
lua_Integer max_tokens_of(lua_State *L, int req);

/* ---------- reading the answer ---------- */
/* An answer's few fields are found in one pass over its JSON text, which is checked in the
 * same pass (json.h's json_pick): no Lua table is made of a document read for five values.
 * Every list of picks starts with the two places a provider puts an error's message. */
#define WANT(path) {(path), NULL, 0}
#define ERROR_PICKS WANT("error.message"), WANT("error")
#define PICK(picks) picks, (int)(sizeof picks / sizeof *picks)

void take_string(const struct json_pick *p, char *out, size_t size);
void take_count(const struct json_pick *p, lua_Integer *out);
/* Appends a picked JSON string to out (anything else, null included, adds nothing). */
void add_string(struct buf *out, const struct json_pick *p);
void add_text(struct call *k, const struct json_pick *p);
int is_container(const struct json_pick *p);
/* Ends the call's decoding with an error of kind. */
void fail_with(struct call *k, const char *kind, const char *fmt, ...);
/* A 2xx body or stream event that carries an error instead of an answer: 1 when it did. */
int take_provider_error(struct call *k, const struct json_pick *picks);

#endif
