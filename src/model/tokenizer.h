// Tokenizers built from GGUF metadata: byte-level BPE (tokenizer.ggml.model = "gpt2", with
// the pre-tokenizer named by tokenizer.ggml.pre) and SentencePiece-style BPE ("llama").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace sieve {

class GgufFile;

enum class TokenType : int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

// Everything a tokenizer is built from: the GGUF tokenizer.* keys, copied out of the file
// (so the tokenizer does not keep the mapping alive). Tests build small vocabularies by hand.
struct TokenizerVocab {
  std::string model;                // tokenizer.ggml.model: "gpt2" | "llama"
  std::string pre;                  // tokenizer.ggml.pre (gpt2 only); empty = "default"
  std::vector<std::string> tokens;  // id -> text
  std::vector<float> scores;        // SPM merge scores (required for "llama")
  std::vector<TokenType> types;     // empty = all normal
  std::vector<std::string> merges;  // BPE merges "left right", rank = index
  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  std::optional<bool> add_bos, add_eos, add_space_prefix;  // absent: per-model default
  std::string chat_template;
};

// A piece of input text and whether control-token texts inside it may become their ids.
struct TextSpan {
  std::string_view text;
  bool parse_special = false;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Builds the tokenizer a file describes; an unsupported model/pre-tokenizer is an error.
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& f);
  static Result<std::unique_ptr<Tokenizer>> from_vocab(TokenizerVocab v);

  // parse_special: control and user-defined token texts inside `text` become their ids
  // (chat templates need this); otherwise they are tokenized as plain text.
  // add_bos: prepend BOS when the model asks for it (add_bos_token); also appends EOS
  // when the model asks for that (add_eos_token), like llama.cpp's add_special.
  // Invalid UTF-8 never fails: byte-level BPE sees each bad byte as U+FFFD (as llama.cpp
  // does); SentencePiece encodes bad bytes with byte-fallback tokens.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const {
    const TextSpan span{text, parse_special};
    return encode_spans(std::span<const TextSpan>(&span, 1), add_bos);
  }
  // encode() of the spans' concatenation, where control tokens are matched only inside spans
  // with parse_special: a chat template's own markers are, user content is plain text even
  // where it spells <|im_start|>. Text that is not a special token is tokenized across span
  // boundaries exactly as one text, so without special texts in the content the ids equal
  // encode(concatenation, add_bos, true).
  virtual std::vector<int32_t> encode_spans(std::span<const TextSpan> spans,
                                            bool add_bos) const = 0;
  // The bytes a token stands for (byte tokens -> the byte; control tokens -> "" unless
  // render_special). Pieces may be partial UTF-8: concatenate before printing.
  // Ids outside [0, n_vocab) give "" (decode skips them).
  virtual std::string token_to_piece(int32_t id, bool render_special = false) const = 0;
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;
  // "gpt2" (byte-level BPE) or "llama" (SentencePiece-style BPE).
  virtual std::string_view model_name() const = 0;

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  int32_t eot_id() const { return eot_; }
  bool add_eos() const { return add_eos_; }
  bool valid_id(int32_t id) const { return id >= 0 && id < n_vocab(); }
  bool add_bos() const { return add_bos_; }
  // End of generation: eos, eot, <|im_end|>/<end_of_turn>-style tokens named by metadata.
  bool is_eog(int32_t id) const;
  TokenType token_type(int32_t id) const;  // TokenType::undefined for ids out of range
  // Raw vocabulary text ("" for ids out of range).
  const std::string& token_text(int32_t id) const {
    static const std::string empty;
    return valid_id(id) ? tokens_[id] : empty;
  }
  // Id of a token by its exact vocabulary text, or -1.
  virtual int32_t find_token(std::string_view text) const = 0;
  const std::string& chat_template() const { return chat_template_; }

 protected:
  // Takes the shared fields out of v (tokens, types, special ids, flags, template) and
  // derives the end-of-generation set; default_add_bos applies when the key is absent.
  void init_common(TokenizerVocab& v, bool default_add_bos);

  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<int32_t> eog_ids_;
  int32_t bos_ = -1;
  int32_t eos_ = -1;
  int32_t eot_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool strip_leading_space_ = false;  // decode drops the space add_space_prefix put there
  std::string chat_template_;
};

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

// Reads the tokenizer.* keys of a file; missing required keys are errors naming them.
Result<TokenizerVocab> read_tokenizer_vocab(const GgufFile& f);

// Renders messages with the model's chat template. Templates are recognised by their
// structure (ChatML as SmolLM2 uses, Gemma's <start_of_turn>), not by running Jinja; an
// unrecognised template is an error naming the fix (--chat off, or a known template).
// BOS: when the model adds BOS itself (add_bos()), the template's leading bos_token text is
// left out so that encode(result, add_bos=true, parse_special=true) yields exactly one BOS;
// otherwise the BOS text is rendered. Either way: encode with add_bos=true,
// parse_special=true. (chat_template.h has the details and a template-string overload.)
Result<std::string> apply_chat_template(const Tokenizer& tok, std::span<const ChatMessage> msgs,
                                        bool add_generation_prompt);

}  // namespace sieve
