/* llm_responses.c — OpenAI's Responses API as a wire of rlm.core.llm (llm_wire.h), for models
 * served only there (o3-pro, gpt-5-pro and the like). The request: the system prompt as
 * "instructions", the messages as "input", max_tokens as "max_output_tokens" (the API takes no
 * stop sequences). The answer: the "output_text" parts of its "message" items; a "refusal"
 * part is the model declining; status "incomplete" says why it stopped short. Streamed, the
 * text comes as response.output_text.delta events and the rest in the closing event's
 * "response". */
#include <string.h>

#include <lauxlib.h>

#include "llm_wire.h"

static void responses_build(struct body *b, struct call *k, int req, int msgs, int prompt)
{
    lua_State *L = b->L;
    (void)k;
    if (lua_getfield(L, req, "stop") != LUA_TNIL)
        luaL_error(L, "the Responses API takes no stop sequences: leave 'stop' out");
    lua_pop(L, 1);
    int t = lua_getfield(L, req, "system");
    if (t == LUA_TNUMBER)
        lua_tostring(L, -1);
    if (t != LUA_TNIL)
        put_member(b, "instructions");
    else
        lua_pop(L, 1);
    if (body_key(b, "input")) {
        if (msgs) {
            body_value(b, msgs);
        } else {
            static const char open[] = "[{\"role\":\"user\",\"content\":";
            body_add(b, open, sizeof open - 1);
            body_value(b, prompt);
            body_add(b, "}]", 2);
        }
    }
    lua_Integer max_tokens = max_tokens_of(L, req);
    if (max_tokens > 0) {
        lua_pushinteger(L, max_tokens);
        put_member(b, "max_output_tokens");
    }
}

/* The text and refusal parts of the output items, in order. */
static void output_parts(struct call *k, const struct json_pick *output)
{
    size_t n, m;
    for (const char *item = json_next_item(output->at, output->len, NULL, &n); item;
         item = json_next_item(output->at, output->len, item + n, &n)) {
        struct json_pick p[] = {WANT("type"), WANT("content")};
        char type[32] = "";
        json_pick(item, n, PICK(p), NULL, 0);
        take_string(&p[0], type, sizeof type);
        if (strcmp(type, "message") != 0 || !is_container(&p[1]))
            continue;
        for (const char *part = json_next_item(p[1].at, p[1].len, NULL, &m); part;
             part = json_next_item(p[1].at, p[1].len, part + m, &m)) {
            struct json_pick q[] = {WANT("type"), WANT("text"), WANT("refusal")};
            char kind[32] = "";
            json_pick(part, m, PICK(q), NULL, 0);
            take_string(&q[0], kind, sizeof kind);
            if (strcmp(kind, "output_text") == 0)
                add_text(k, &q[1]);
            else if (strcmp(kind, "refusal") == 0)
                add_string(&k->refusal, &q[2]);
        }
    }
}

/* A whole response (whole), or a stream's closing event, whose "response" is one: its model,
 * why it ended and its usage, and for a whole one its text. */
static int read_response(struct call *k, const char *data, size_t len, char *err, size_t errlen,
                         int whole)
{
    struct json_pick p[] = {ERROR_PICKS,
                            WANT(whole ? "model" : "response.model"),
                            WANT(whole ? "status" : "response.status"),
                            WANT(whole ? "incomplete_details.reason"
                                       : "response.incomplete_details.reason"),
                            WANT(whole ? "output" : "response.output"),
                            WANT(whole ? "usage.input_tokens" : "response.usage.input_tokens"),
                            WANT(whole ? "usage.output_tokens" : "response.usage.output_tokens"),
                            WANT(whole ? "usage.input_tokens_details.cached_tokens"
                                       : "response.usage.input_tokens_details.cached_tokens"),
                            WANT("response.error.message"),
                            WANT("type")};
    if (!json_pick(data, len, PICK(p), err, errlen))
        return 0;
    if (take_provider_error(k, p))
        return 1;
    char type[48] = "";
    take_string(&p[10], type, sizeof type);
    if (!whole && strcmp(type, "response.output_text.delta") == 0)
        return 1;   /* read by responses_event */
    if (strcmp(type, "response.failed") == 0) {
        char msg[400] = "";
        take_string(&p[9], msg, sizeof msg);
        fail_with(k, "provider", "the provider reported an error: %s",
                  *msg ? msg : "the response failed");
        return 1;
    }
    take_string(&p[2], k->model, sizeof k->model);
    char status[32] = "";
    take_string(&p[3], status, sizeof status);
    if (strcmp(status, "incomplete") == 0)
        take_string(&p[4], k->finish, sizeof k->finish);
    else if (*status)
        snprintf(k->finish, sizeof k->finish, "%s", status);
    if (whole) {
        if (!is_container(&p[5]))
            fail_with(k, "malformed", "the response has no output");
        else
            output_parts(k, &p[5]);
    }
    take_count(&p[6], &k->input_tokens);
    take_count(&p[7], &k->output_tokens);
    take_count(&p[8], &k->cache_read);   /* part of input_tokens, as OpenAI's prompt_tokens */
    return 1;
}

static int responses_whole(struct call *k, const char *data, size_t len, char *err,
                           size_t errlen)
{
    return read_response(k, data, len, err, errlen, 1);
}

/* One stream event: a delta of text or of a refusal, or the closing event's response (its
 * text came in the deltas). Other events (the output items' starts and ends) add nothing. */
static int responses_event(struct call *k, const char *data, size_t len, char *err,
                           size_t errlen)
{
    struct json_pick p[] = {WANT("type"), WANT("delta"), WANT("message")};
    if (!json_pick(data, len, PICK(p), err, errlen))
        return 0;
    char type[48] = "";
    take_string(&p[0], type, sizeof type);
    if (strcmp(type, "response.output_text.delta") == 0) {
        add_text(k, &p[1]);
    } else if (strcmp(type, "response.refusal.delta") == 0) {
        add_string(&k->refusal, &p[1]);
    } else if (strcmp(type, "error") == 0) {
        char msg[400] = "";
        take_string(&p[2], msg, sizeof msg);
        fail_with(k, "provider", "the stream reported an error: %s", *msg ? msg : "(none given)");
    } else if (strcmp(type, "response.completed") == 0 ||
               strcmp(type, "response.incomplete") == 0 || strcmp(type, "response.failed") == 0) {
        return read_response(k, data, len, err, errlen, 0);
    }
    return 1;
}

static int responses_ends_stream(const char *event, const char *data, size_t len)
{
    (void)data, (void)len;
    return strcmp(event, "response.completed") == 0 || strcmp(event, "response.incomplete") == 0 ||
           strcmp(event, "response.failed") == 0 || strcmp(event, "error") == 0;
}

/* Its statuses and reasons for stopping short, in the chat completions' words. */
static const char *const responses_words[][2] = {
    {"completed", "stop"}, {"max_output_tokens", "length"}, {NULL, NULL}};

const struct wire LLM_RESPONSES = {
    .name = "responses",
    .auth_prefix = "Authorization: Bearer ",
    .build = responses_build,
    .ends_stream = responses_ends_stream,
    .event = responses_event,
    .whole = responses_whole,
    .finish_words = responses_words,
};
