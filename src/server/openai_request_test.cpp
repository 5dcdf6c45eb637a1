#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <string>

#include "server/metrics.h"

namespace sieve::server {
namespace {

using json = nlohmann::json;

RequestLimits lim() {
  RequestLimits l;
  l.n_ctx = 2048;
  l.n_vocab = 1000;
  l.max_tokens = 2048;
  return l;
}

GenRequest parse(const std::string& body, bool chat = false) {
  return parse_gen_request(parse_body(body, lim()), chat, lim(), SamplerParams{});
}

// The ApiError a body gets (status 0: accepted).
ApiError error_of(const std::string& body, bool chat = false) {
  try {
    (void)parse(body, chat);
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError{0, "", "", "", "", json::object()};
}

TEST(ParseBody, RejectsWhatIsNotAJsonObject) {
  for (const char* b :
       {"", "   ", "{", "{\"a\":1} x", "[1,2]", "42", "\"s\"", "null", "{\"a\":NaN}",
        "{\"a\":Infinity}", "{\"a\":1e400}", "{\"a\":\"\\ud800\"}", "{'a':1}"}) {
    try {
      (void)parse_body(b, lim());
      ADD_FAILURE() << "accepted: " << b;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << b;
      EXPECT_EQ(e.code, "invalid_json") << b;
    }
  }
  std::string deep(100000, '[');
  EXPECT_THROW((void)parse_body(deep, lim()), ApiError);
  std::string bad_utf8 = "{\"prompt\":\"a\xff\xfe\"}";
  EXPECT_THROW((void)parse_body(bad_utf8, lim()), ApiError);
  // brackets inside strings do not count as nesting
  EXPECT_NO_THROW((void)parse_body("{\"prompt\":\"" + std::string(200, '[') + "\"}", lim()));
}

// issue 44: a 32 MB array of token ids cost +600 MB parsed before its 400. The values are
// counted first: over the limit is 413 before parsing; under it the caller is charged.
TEST(ParseBody, ValuesAreCountedAndChargedBeforeParsing) {
  RequestLimits l = lim();
  l.max_json_values = 1000;
  std::string big = R"({"prompt":[)";
  for (int i = 0; i < 2000; ++i) big += std::string(i ? "," : "") + "1";
  big += "]}";
  int64_t charged = 0;
  try {
    (void)parse_body(big, l, [&](int64_t n) { charged += n; });
    ADD_FAILURE() << "accepted 2000 values";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 413);
    EXPECT_EQ(e.code, "request_too_large");
  }
  EXPECT_EQ(charged, 0);
  const std::string ok = R"({"prompt":[1,2,3],"s":"a,b,c,[,{"})";
  (void)parse_body(ok, l, [&](int64_t n) { charged += n; });
  EXPECT_GE(charged, static_cast<int64_t>(ok.size()) + 5 * 50);
  EXPECT_THROW((void)parse_body(ok, l, [](int64_t) { throw ApiError::bad("", "over budget"); }),
               ApiError);
}

TEST(ParseGenRequest, CompletionsFields) {
  const GenRequest g =
      parse(R"({"model":"m","prompt":"hi","max_tokens":5,"temperature":0.5,"top_p":0.9,
    "top_k":7,"min_p":0.1,"presence_penalty":1,"frequency_penalty":-1,"repetition_penalty":1.1,"seed":42,
    "stop":["a","b"],"stream":true,"stream_options":{"include_usage":true},"logprobs":3,
    "sieve":{"policy":"dense"}})");
  ASSERT_EQ(g.prompts.size(), 1u);
  EXPECT_EQ(g.prompts[0].text, "hi");
  EXPECT_EQ(*g.max_tokens, 5);
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.9f);
  EXPECT_EQ(g.sampling.top_k, 7);
  EXPECT_FLOAT_EQ(g.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(g.sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(g.sampling.seed, 42u);
  EXPECT_TRUE(g.seed_given);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(g.stream && g.include_usage && g.logprobs);
  EXPECT_EQ(g.top_logprobs, 3);
  ASSERT_TRUE(g.policy_json);
  EXPECT_EQ(json::parse(*g.policy_json)["policy"], "dense");
}

TEST(ParseGenRequest, PromptForms) {
  EXPECT_EQ(parse(R"({"prompt":[1,2,3]})").prompts.at(0).tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse(R"({"prompt":[[4,5]]})").prompts.at(0).tokens, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(parse(R"({"prompt":["text"]})").prompts.at(0).text, "text");
  // a batch: one choice per prompt, texts and token arrays mixed (lm-eval sends either)
  const GenRequest b = parse(R"({"prompt":["a",[1,2],"c"],"echo":true,"logprobs":1})");
  ASSERT_EQ(b.prompts.size(), 3u);
  EXPECT_EQ(b.prompts[1].tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(b.prompts[1].is_tokens && !b.prompts[2].is_tokens);
  EXPECT_TRUE(b.echo && b.logprobs);
  EXPECT_EQ(error_of(R"({"prompt":["a",5]})").param, "prompt");
  EXPECT_EQ(error_of(R"({"prompt":["a",""]})").param, "prompt");
  std::string many = R"({"prompt":[)";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + "\"x\"";
  EXPECT_EQ(error_of(many + "]}").param, "prompt");
  EXPECT_FALSE(parse(R"({"prompt":"x"})").parse_special);
  EXPECT_TRUE(parse(R"({"prompt":"x","parse_special":true})").parse_special);
  EXPECT_EQ(error_of(R"({"prompt":[-1]})").code, "invalid_token_id");
  EXPECT_EQ(error_of(R"({"prompt":[1000]})").code, "invalid_token_id");
  EXPECT_EQ(error_of(R"({"prompt":[2147483647]})").code, "invalid_token_id");
  EXPECT_EQ(error_of(R"({"prompt":[1.5]})").code, "invalid_token_id");
  EXPECT_EQ(error_of(R"({"prompt":[1,"a"]})").code, "invalid_token_id");
  for (const char* b :
       {R"({})", R"({"prompt":""})", R"({"prompt":[]})", R"({"prompt":5})", R"({"prompt":{}})",
        R"({"prompt":null})", R"({"prompt":"x","echo":1})", R"({"prompt":"x","suffix":"y"})"}) {
    EXPECT_EQ(error_of(b).status, 400) << b;
  }
}

TEST(ParseGenRequest, NumbersAreBounded) {
  for (const char* f : {R"("max_tokens":-1)",
                        R"("max_tokens":2049)",
                        R"("max_tokens":2147483648)",
                        R"("max_tokens":9223372036854775807)",
                        R"("max_tokens":18446744073709551615)",
                        R"("max_tokens":1.5)",
                        R"("max_tokens":"5")",
                        R"("max_tokens":true)",
                        R"("n":2)",
                        R"("n":0)",
                        R"("n":-1)",
                        R"("n":1000000)",
                        R"("logprobs":-1)",
                        R"("logprobs":21)",
                        R"("logprobs":1000000)",
                        R"("temperature":-1)",
                        R"("temperature":1e9)",
                        R"("temperature":"hot")",
                        R"("top_p":-0.1)",
                        R"("top_p":1.1)",
                        R"("top_k":-5)",
                        R"("top_k":2147483648)",
                        R"("min_p":1.5)",
                        R"("presence_penalty":3)",
                        R"("frequency_penalty":-2.5)",
                        R"("repetition_penalty":0)",
                        R"("repetition_penalty":11)",
                        R"("seed":-2)",
                        R"("seed":"abc")",
                        R"("seed":1.5)",
                        R"("seed":18446744073709551616)",
                        R"("stop":5)",
                        R"("stop":[1])",
                        R"("stop":{})",
                        R"("stream":"yes")",
                        R"("stream_options":1)",
                        R"("logit_bias":{"1":5})",
                        R"("best_of":3)",
                        R"("sieve":"dense")",
                        R"("policy":3)",
                        R"("penalty_last_n":-2)"}) {
    const std::string body = std::string("{\"prompt\":\"x\",") + f + "}";
    const ApiError e = error_of(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_FALSE(e.message.empty()) << body;
  }
  std::string many = R"({"prompt":"x","stop":[)";
  for (int i = 0; i < 17; ++i) many += std::string(i ? "," : "") + "\"s" + std::to_string(i) + "\"";
  EXPECT_EQ(error_of(many + "]}").status, 400);
  EXPECT_EQ(error_of(R"({"prompt":"x","stop":")" + std::string(2000, 'a') + "\"}").status, 400);
  // accepted edge values
  for (const char* f :
       {R"("max_tokens":0)", R"("max_tokens":2048)", R"("max_tokens":3.0)", R"("n":1)",
        R"("logprobs":0)", R"("logprobs":20)", R"("temperature":0)", R"("top_p":0)", R"("top_p":1)",
        R"("top_k":-1)", R"("top_k":0)", R"("seed":-1)", R"("seed":18446744073709551615)",
        R"("stop":"")", R"("stop":null)", R"("logit_bias":{})", R"("user":"u")",
        R"("unknown_field":{"x":1})"}) {
    const std::string body = std::string("{\"prompt\":\"x\",") + f + "}";
    EXPECT_EQ(error_of(body).status, 0) << body << ": " << error_of(body).message;
  }
  EXPECT_FALSE(parse(R"({"prompt":"x","seed":-1})").seed_given);
  EXPECT_EQ(parse(R"({"prompt":"x","top_p":0})").sampling.top_k, 1);  // top_p 0: the top token
}

TEST(ParseGenRequest, PriorityIsAnIntegerNamedInItsError) {
  EXPECT_EQ(parse(R"({"prompt":"x"})").priority, 0);
  EXPECT_EQ(parse(R"({"prompt":"x","priority":-3})").priority, -3);
  EXPECT_EQ(parse(R"({"prompt":"x","priority":7})").priority, 7);
  EXPECT_EQ(parse(R"({"prompt":"x","priority":null})").priority, 0);
  for (const char* f :
       {R"("priority":"high")", R"("priority":1.5)", R"("priority":true)", R"("priority":[1])",
        R"("priority":{})", R"("priority":2147483648)", R"("priority":-2147483649)"}) {
    const std::string body = std::string("{\"prompt\":\"x\",") + f + "}";
    const ApiError e = error_of(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, "priority") << body;
    EXPECT_NE(e.message.find("priority"), std::string::npos) << body << ": " << e.message;
  }
  // chat requests take it too
  EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":"hi"}],"priority":"1"})", true).param,
            "priority");
}

TEST(ParseGenRequest, ChatMessages) {
  const GenRequest g = parse(R"({"messages":[{"role":"developer","content":"be brief"},
    {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
    "max_completion_tokens":9,"logprobs":true,"top_logprobs":2})",
                             true);
  ASSERT_EQ(g.messages.size(), 2u);
  EXPECT_EQ(g.messages[0].role, "system");
  EXPECT_EQ(g.messages[1].content, "ab");
  EXPECT_EQ(*g.max_tokens, 9);
  EXPECT_TRUE(g.logprobs);
  EXPECT_EQ(g.top_logprobs, 2);
  for (const char* b :
       {R"({})", R"({"messages":[]})", R"({"messages":"hi"})", R"({"messages":[1]})",
        R"({"messages":[{"role":"hacker","content":"x"}]})", R"({"messages":[{"content":"x"}]})",
        R"({"messages":[{"role":"user","content":null}]})", R"({"messages":[{"role":"user"}]})",
        R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})",
        R"({"messages":[{"role":"user","content":5}]})",
        R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})",
        R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})",
        R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})",
        R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}})",
        R"({"messages":[{"role":"tool","content":"x"}]})"}) {
    EXPECT_EQ(error_of(b, true).status, 400) << b;
  }
}

TEST(Metrics, PrometheusText) {
  Metrics m;
  m.count_http("completions", 200);
  m.count_http("completions", 400);
  SparseStats s;
  s.selected_tokens = 25;
  s.context_tokens = 100;
  s.cache_lookups = 4;
  s.cache_hits = 3;
  m.count_finished("stop", 10, 4, 5, s);
  m.observe_ttft(0.2);
  m.observe_itl(0.004);
  m.observe_queue(0.03);
  EngineSnapshot e;
  e.ready = true;
  e.sched.step_ms.observe(40);
  e.sched.step_ms.observe(400);
  e.kv.n_pages_used = 3;
  e.kv.n_pages_total = 12;
  e.kv.page_bytes = 1000;
  e.backend = "cuda";
  const std::string t = m.render(e);
  for (const char* want : {"sieve_http_requests_total{endpoint=\"completions\",code=\"400\"} 1",
                           "sieve_request_success_total{finish_reason=\"stop\"} 1",
                           "sieve_prompt_tokens_total 10",
                           "sieve_prefix_cache_hit_tokens_total 4",
                           "sieve_generation_tokens_total 5",
                           "sieve_sparse_selected_fraction 0.25",
                           "sieve_selection_cache_hit_rate 0.75",
                           "sieve_kv_pages_used 3",
                           "sieve_kv_cache_usage_ratio 0.25",
                           "sieve_kv_pool_bytes{backend=\"cuda\"} 12000",
                           "sieve_kv_used_bytes{backend=\"cuda\"} 3000",
                           "sieve_time_to_first_token_seconds_bucket{le=\"0.25\"} 1",
                           "sieve_time_to_first_token_seconds_bucket{le=\"0.1\"} 0",
                           "sieve_time_to_first_token_seconds_count 1",
                           "sieve_inter_token_latency_seconds_bucket{le=\"+Inf\"} 1",
                           "# TYPE sieve_time_to_first_token_seconds histogram",
                           "# TYPE sieve:time_to_first_token_seconds histogram",
                           "sieve:time_to_first_token_seconds_count 1",
                           "sieve:inter_token_latency_seconds_bucket{le=\"0.005\"} 1",
                           "sieve:request_queue_time_seconds_bucket{le=\"0.05\"} 1",
                           "sieve:e2e_request_latency_seconds_count 0",
                           "# TYPE sieve:iteration_duration_seconds histogram",
                           "sieve:iteration_duration_seconds_bucket{le=\"0.05\"} 1",
                           "sieve:iteration_duration_seconds_bucket{le=\"0.5\"} 2",
                           "sieve:iteration_duration_seconds_count 2",
                           "sieve:iteration_duration_seconds_sum 0.44"}) {
    EXPECT_NE(t.find(want), std::string::npos) << want << "\n" << t;
  }
}

}  // namespace
}  // namespace sieve::server
