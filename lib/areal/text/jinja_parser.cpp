#include "areal/text/jinja_parser.h"

#include "areal/text/jinja_builtins.h"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <set>

namespace areal::jinja {
namespace {

struct Token {
  enum class Type { Name, String, Integer, Float, Operator, End } type;
  std::string text;
  int line;
};

// A piece of the template: text to copy, or the tokens of a {{ }} or {% %} tag.
struct Segment {
  enum class Type { Text, Output, Statement } type;
  std::string text;
  std::vector<Token> tokens;
  int line;
};

Node make_node(Node::Kind kind, int line, std::string text = "") {
  Node n;
  n.kind = kind;
  n.line = line;
  n.text = std::move(text);
  return n;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string rstrip_all(const std::string& s) {
  size_t end = s.size();
  while (end > 0 && is_space(s[end - 1])) --end;
  return s.substr(0, end);
}

class Lexer {
 public:
  Lexer(const std::string& source, const std::string& name) : name_(name) {
    // As Jinja: every newline becomes "\n", and one trailing newline is dropped.
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Segment> run() {
    std::vector<Segment> out;
    bool line_starting = true, strip_next = false;
    while (pos_ < src_.size()) {
      size_t open = src_.find('{', pos_);
      while (open != std::string::npos && open + 1 < src_.size() && !std::strchr("{%#", src_[open + 1]))
        open = src_.find('{', open + 1);
      if (open + 1 >= src_.size()) open = std::string::npos;
      std::string text = src_.substr(pos_, open == std::string::npos ? std::string::npos : open - pos_);
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
      }
      if (open == std::string::npos) {
        push_text(out, text);
        break;
      }
      const char kind = src_[open + 1];
      const char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (sign == '-') {
        text = rstrip_all(text);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
          bool blank = true;
          for (size_t k = l_pos; k < text.size(); ++k) blank = blank && is_space(text[k]);
          if (blank) text.erase(l_pos);
        }
      }
      line_ += count_newlines(src_.substr(pos_, open - pos_));
      push_text(out, text);
      pos_ = open + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      const int tag_line = line_;
      bool right_strip = false, keep_newline = false;
      if (kind == '#') {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string::npos) fail(tag_line, "a comment is not closed with #}");
        right_strip = close > pos_ && src_[close - 1] == '-';
        line_ += count_newlines(src_.substr(pos_, close - pos_));
        pos_ = close + 2;
      } else {
        Segment tag{kind == '{' ? Segment::Type::Output : Segment::Type::Statement, "", {}, tag_line};
        const char close_sign = read_tag(kind == '{' ? "}}" : "%}", tag.tokens);
        right_strip = close_sign == '-';
        keep_newline = close_sign == '+';
        out.push_back(std::move(tag));
      }
      strip_next = right_strip;
      line_starting = false;
      if (!right_strip && !keep_newline && kind != '{' && pos_ < src_.size() && src_[pos_] == '\n') {  // trim_blocks
        ++pos_;
        ++line_;
        line_starting = true;
      }
      if (right_strip) {
        size_t k = pos_;
        while (k < src_.size() && is_space(src_[k])) ++k;
        line_starting = k > pos_ && src_[k - 1] == '\n';
      }
    }
    return out;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw JinjaError(name_ + " line " + std::to_string(line) + ": " + what);
  }
  static int count_newlines(const std::string& s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
  }
  void push_text(std::vector<Segment>& out, const std::string& text) {
    if (!text.empty()) out.push_back({Segment::Type::Text, text, {}, line_});
  }

  // Reads tokens up to the closing delimiter; returns its sign: '-' (`-%}`), '+' or 0.
  char read_tag(const std::string& close, std::vector<Token>& tokens) {
    int depth = 0;  // open brackets: a `}` inside one is an operator, not the end of the tag
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) line_ += src_[pos_++] == '\n';
      if (pos_ >= src_.size()) fail(line_, "a tag is not closed with " + close);
      if (depth == 0 && src_.compare(pos_, close.size(), close) == 0) {
        pos_ += close.size();
        tokens.push_back({Token::Type::End, "", line_});
        return 0;
      }
      if (depth == 0 && src_[pos_] == '-' && src_.compare(pos_ + 1, close.size(), close) == 0) {
        pos_ += 1 + close.size();
        tokens.push_back({Token::Type::End, "", line_});
        return '-';
      }
      if (src_[pos_] == '+' && src_.compare(pos_ + 1, close.size(), close) == 0) {
        pos_ += 1 + close.size();
        tokens.push_back({Token::Type::End, "", line_});
        return '+';
      }
      Token token = next_token();
      if (token.type == Token::Type::Operator) {
        if (token.text == "(" || token.text == "[" || token.text == "{") ++depth;
        if (token.text == ")" || token.text == "]" || token.text == "}") --depth;
      }
      tokens.push_back(std::move(token));
    }
  }

  Token next_token() {
    const char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = pos_;
      while (end < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
      Token t{Token::Type::Name, src_.substr(pos_, end - pos_), line_};
      pos_ = end;
      return t;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t end = pos_;
      bool is_float = false;
      while (end < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
      if (end + 1 < src_.size() && src_[end] == '.' && std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
        is_float = true;
        ++end;
        while (end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]))) ++end;
      }
      if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
        size_t k = end + 1;
        if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
        if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
          is_float = true;
          end = k;
          while (end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]))) ++end;
        }
      }
      std::string digits;
      for (size_t k = pos_; k < end; ++k)
        if (src_[k] != '_') digits += src_[k];
      pos_ = end;
      return {is_float ? Token::Type::Float : Token::Type::Integer, digits, line_};
    }
    if (c == '\'' || c == '"') return read_string(c);
    static const char* kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                                       ")", "{", "}", "<", ">", "=", ".", ":", "|", ",", ";"};
    for (const char* op : kOperators) {
      const size_t n = std::strlen(op);
      if (src_.compare(pos_, n, op) == 0) {
        pos_ += n;
        return {Token::Type::Operator, op, line_};
      }
    }
    fail(line_, std::string("unexpected character '") + c + "'");
  }

  Token read_string(char quote) {
    const int line = line_;
    std::string out;
    for (++pos_; pos_ < src_.size() && src_[pos_] != quote; ++pos_) {
      char c = src_[pos_];
      if (c == '\n') ++line_;
      if (c != '\\' || pos_ + 1 >= src_.size()) {
        out += c;
        continue;
      }
      const char e = src_[++pos_];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': ++line_; break;  // a continued line
        case 'x':
        case 'u':
        case 'U': {
          const int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          const std::string hex = src_.substr(pos_ + 1, digits);
          pos_ += digits;
          out += utf32_to_utf8(std::u32string(1, static_cast<char32_t>(std::strtoul(hex.c_str(), nullptr, 16))));
          break;
        }
        default: out += '\\', out += e;  // Python keeps unknown escapes as written
      }
    }
    if (pos_ >= src_.size()) fail(line, "a string is not closed");
    ++pos_;
    return {Token::Type::String, out, line};
  }

  std::string src_;
  std::string name_;
  size_t pos_ = 0;
  int line_ = 1;
};

// Builds nodes and expressions from the segments.
class Parser {
 public:
  Parser(std::vector<Segment> segments, const std::string& name) : segments_(std::move(segments)), name_(name) {}

  std::vector<Node> parse_all() {
    std::vector<Node> nodes = parse_body({});
    if (segment_ < segments_.size()) fail(segments_[segment_].line, "unexpected '" + statement_name() + "'");
    return nodes;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw JinjaError(name_ + " line " + std::to_string(line) + ": " + what);
  }

  // The statement's first word at the current segment ("" for others).
  std::string statement_name() const {
    if (segment_ >= segments_.size() || segments_[segment_].type != Segment::Type::Statement) return "";
    const auto& tokens = segments_[segment_].tokens;
    return tokens.empty() || tokens[0].type != Token::Type::Name ? "" : tokens[0].text;
  }

  // Nodes up to a statement named in `ends` (left unread), or the end of the template.
  std::vector<Node> parse_body(const std::set<std::string>& ends) {
    std::vector<Node> nodes;
    while (segment_ < segments_.size()) {
      const Segment& s = segments_[segment_];
      if (s.type == Segment::Type::Text) {
        nodes.push_back(make_node(Node::Kind::Text, s.line, s.text));
        ++segment_;
        continue;
      }
      tokens_ = &s.tokens;
      token_ = 0;
      if (s.type == Segment::Type::Output) {
        ++segment_;
        Node n = make_node(Node::Kind::Output, s.line);
        n.expr = parse_expression();
        expect_end();
        nodes.push_back(std::move(n));
        continue;
      }
      const std::string word = statement_name();
      if (ends.count(word)) return nodes;
      ++segment_;
      nodes.push_back(parse_statement(word, s.line));
    }
    if (!ends.empty()) {
      std::string names;
      for (const auto& e : ends) names += (names.empty() ? "" : " or ") + e;
      fail(segments_.empty() ? 1 : segments_.back().line, "the template ends before {% " + names + " %}");
    }
    return nodes;
  }

  // Reads the statement tag `word` ... its end tag.
  Node parse_statement(const std::string& word, int line) {
    Node n = make_node(Node::Kind::Text, line);
    token_ = 1;
    if (word == "if") {
      n.kind = Node::Kind::If;
      n.conditions.push_back(parse_expression());
      expect_end();
      while (true) {
        n.branches.push_back(parse_body({"elif", "else", "endif"}));
        const std::string end = enter_end_tag();
        if (end == "elif") {
          n.conditions.push_back(parse_expression());
          expect_end();
        } else if (end == "else") {
          expect_end();
          n.branches.push_back(parse_body({"endif"}));
          enter_end_tag();
          expect_end();
          break;
        } else {
          expect_end();
          break;
        }
      }
    } else if (word == "for") {
      n.kind = Node::Kind::For;
      do n.targets.push_back(expect_name());
      while (accept(","));
      if (!accept_name("in")) fail(line, "expected 'in' in the for statement");
      n.expr = parse_conditional(/*allow_if=*/false);
      if (accept_name("if")) n.filter = parse_expression();
      if (accept_name("recursive")) fail(line, "recursive loops are not supported");
      expect_end();
      n.body = parse_body({"else", "endfor"});
      if (enter_end_tag() == "else") {
        expect_end();
        n.else_body = parse_body({"endfor"});
        enter_end_tag();
      }
      expect_end();
    } else if (word == "set") {
      n.targets.push_back(expect_name());
      if (accept(".")) n.targets.push_back(expect_name());
      if (accept("=")) {
        n.kind = Node::Kind::Set;
        n.expr = parse_expression();
        expect_end();
      } else {
        n.kind = Node::Kind::SetBlock;
        expect_end();
        n.body = parse_body({"endset"});
        enter_end_tag();
        expect_end();
      }
    } else if (word == "macro") {
      n.kind = Node::Kind::Macro;
      n.targets.push_back(expect_name());
      expect("(");
      while (!accept(")")) {
        std::string param = expect_name();
        ExprPtr fallback = accept("=") ? parse_expression() : nullptr;
        n.params.emplace_back(param, fallback);
        if (!accept(",")) {
          expect(")");
          break;
        }
      }
      expect_end();
      n.body = parse_body({"endmacro"});
      enter_end_tag();
      expect_end();
    } else if (word == "break" || word == "continue") {
      n.kind = word == "break" ? Node::Kind::Break : Node::Kind::Continue;
      expect_end();
    } else if (word == "generation") {
      n.kind = Node::Kind::Generation;
      expect_end();
      n.body = parse_body({"endgeneration"});
      enter_end_tag();
      expect_end();
    } else if (word.empty()) {
      fail(line, "a statement tag without a statement");
    } else {
      fail(line, "'{% " + word + " %}' is not supported (supported: if, for, set, macro, break, continue, "
                 "generation)");
    }
    return n;
  }

  // At an end tag left by parse_body: reads its name and returns it.
  std::string enter_end_tag() {
    const std::string word = statement_name();
    tokens_ = &segments_[segment_].tokens;
    token_ = 1;
    ++segment_;
    return word;
  }

  // Tokens within a tag.
  const Token& peek(size_t ahead = 0) const {
    const size_t i = std::min(token_ + ahead, tokens_->size() - 1);
    return (*tokens_)[i];
  }
  bool at_operator(const char* op, size_t ahead = 0) const {
    return peek(ahead).type == Token::Type::Operator && peek(ahead).text == op;
  }
  bool at_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).type == Token::Type::Name && peek(ahead).text == name;
  }
  bool accept(const char* op) {
    if (!at_operator(op)) return false;
    ++token_;
    return true;
  }
  bool accept_name(const char* name) {
    if (!at_name(name)) return false;
    ++token_;
    return true;
  }
  void expect(const char* op) {
    if (!accept(op)) fail(peek().line, std::string("expected '") + op + "', found " + describe(peek()));
  }
  std::string expect_name() {
    if (peek().type != Token::Type::Name) fail(peek().line, "expected a name, found " + describe(peek()));
    return (*tokens_)[token_++].text;
  }
  void expect_end() {
    if (peek().type != Token::Type::End) fail(peek().line, "unexpected " + describe(peek()) + " before the tag's end");
  }
  static std::string describe(const Token& t) {
    return t.type == Token::Type::End ? "the end of the tag" : "'" + t.text + "'";
  }

  ExprPtr make(Expr::Kind kind, int line, std::vector<ExprPtr> children = {}, std::string name = "") {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->line = line;
    e->children = std::move(children);
    e->name = std::move(name);
    return e;
  }

  ExprPtr parse_expression() { return parse_conditional(true); }

  ExprPtr parse_conditional(bool allow_if) {
    ExprPtr e = parse_or();
    while (allow_if && at_name("if")) {
      const int line = peek().line;
      ++token_;
      ExprPtr condition = parse_or();
      ExprPtr otherwise = accept_name("else") ? parse_conditional(true) : nullptr;
      e = make(Expr::Kind::Conditional, line, {e, condition, otherwise});
    }
    return e;
  }
  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (at_name("or")) {
      const int line = peek().line;
      ++token_;
      e = make(Expr::Kind::Or, line, {e, parse_and()});
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (at_name("and")) {
      const int line = peek().line;
      ++token_;
      e = make(Expr::Kind::And, line, {e, parse_not()});
    }
    return e;
  }
  ExprPtr parse_not() {
    if (at_name("not")) {
      const int line = peek().line;
      ++token_;
      return make(Expr::Kind::Not, line, {parse_not()});
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    while (true) {
      const int line = peek().line;
      std::string op;
      for (const char* candidate : {"==", "!=", "<=", ">=", "<", ">"})
        if (at_operator(candidate)) op = candidate;
      if (!op.empty()) {
        ++token_;
      } else if (at_name("in")) {
        ++token_;
        op = "in";
      } else if (at_name("not") && at_name("in", 1)) {
        token_ += 2;
        op = "not in";
      } else {
        return e;
      }
      e = make(Expr::Kind::Binary, line, {e, parse_math1()}, op);
    }
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (at_operator("+") || at_operator("-")) {
      const Token& t = (*tokens_)[token_++];
      e = make(Expr::Kind::Binary, t.line, {e, parse_concat()}, t.text);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (at_operator("~")) {
      const int line = peek().line;
      ++token_;
      e = make(Expr::Kind::Binary, line, {e, parse_math2()}, "~");
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (at_operator("*") || at_operator("/") || at_operator("//") || at_operator("%")) {
      const Token& t = (*tokens_)[token_++];
      e = make(Expr::Kind::Binary, t.line, {e, parse_pow()}, t.text);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (at_operator("**")) {
      const int line = peek().line;
      ++token_;
      e = make(Expr::Kind::Binary, line, {e, parse_unary(true)}, "**");
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (at_operator("-") || at_operator("+")) {
      const Token& t = (*tokens_)[token_++];
      e = make(Expr::Kind::Unary, t.line, {parse_unary(false)}, t.text);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(e);
    return with_filter ? parse_filters_and_tests(e) : e;
  }

  ExprPtr parse_primary() {
    const Token t = peek();
    switch (t.type) {
      case Token::Type::Name: {
        ++token_;
        auto e = std::make_shared<Expr>();
        e->line = t.line;
        if (t.text == "true" || t.text == "True") e->literal = Value(true);
        else if (t.text == "false" || t.text == "False") e->literal = Value(false);
        else if (t.text == "none" || t.text == "None") e->literal = Value::none();
        else e->kind = Expr::Kind::Name, e->name = t.text;
        return e;
      }
      case Token::Type::String: {
        std::string text;
        while (peek().type == Token::Type::String) text += (*tokens_)[token_++].text;  // adjacent literals join
        auto e = std::make_shared<Expr>();
        e->line = t.line;
        e->literal = Value(text);
        return e;
      }
      case Token::Type::Integer:
      case Token::Type::Float: {
        ++token_;
        auto e = std::make_shared<Expr>();
        e->line = t.line;
        e->literal = t.type == Token::Type::Integer ? Value(static_cast<int64_t>(std::strtoll(t.text.c_str(), nullptr, 10)))
                                                    : Value(std::strtod(t.text.c_str(), nullptr));
        return e;
      }
      case Token::Type::Operator: {
        if (accept("(")) {  // a parenthesized expression or a tuple (a list here)
          if (accept(")")) return make(Expr::Kind::List, t.line);
          ExprPtr first = parse_expression();
          if (accept(")")) return first;
          std::vector<ExprPtr> items = {first};
          while (accept(",")) {
            if (at_operator(")")) break;
            items.push_back(parse_expression());
          }
          expect(")");
          return make(Expr::Kind::List, t.line, items);
        }
        if (accept("[")) {
          std::vector<ExprPtr> items;
          while (!accept("]")) {
            items.push_back(parse_expression());
            if (!accept(",")) {
              expect("]");
              break;
            }
          }
          return make(Expr::Kind::List, t.line, items);
        }
        if (accept("{")) {
          std::vector<ExprPtr> items;
          while (!accept("}")) {
            items.push_back(parse_expression());
            expect(":");
            items.push_back(parse_expression());
            if (!accept(",")) {
              expect("}");
              break;
            }
          }
          return make(Expr::Kind::Dict, t.line, items);
        }
        break;
      }
      default: break;
    }
    fail(t.line, "unexpected " + describe(t) + " in an expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const int line = peek().line;
      if (accept(".")) {
        const Token t = peek();
        if (t.type != Token::Type::Name && t.type != Token::Type::Integer)
          fail(t.line, "expected an attribute name after '.', found " + describe(t));
        ++token_;
        if (t.type == Token::Type::Integer) {  // x.0 is x[0]
          auto index = std::make_shared<Expr>();
          index->literal = Value(static_cast<int64_t>(std::strtoll(t.text.c_str(), nullptr, 10)));
          e = make(Expr::Kind::Item, line, {e, index});
        } else {
          e = make(Expr::Kind::Attribute, line, {e}, t.text);
        }
      } else if (accept("[")) {
        ExprPtr parts[3] = {nullptr, nullptr, nullptr};
        int part = 0;
        bool slice = false;
        while (!accept("]")) {
          if (accept(":")) {
            slice = true;
            if (++part > 2) fail(line, "a slice has at most three parts");
            continue;
          }
          parts[part] = parse_expression();
        }
        if (slice) e = make(Expr::Kind::Slice, line, {e, parts[0], parts[1], parts[2]});
        else if (!parts[0]) fail(line, "an empty subscript");
        else e = make(Expr::Kind::Item, line, {e, parts[0]});
      } else if (at_operator("(")) {
        e = parse_call_arguments(make(Expr::Kind::Call, line, {e}));
      } else {
        return e;
      }
    }
  }

  // `( args, name=value )` into call's children (after those it has) and keyword.
  ExprPtr parse_call_arguments(ExprPtr call) {
    auto e = std::const_pointer_cast<Expr>(call);
    expect("(");
    while (!accept(")")) {
      if (peek().type == Token::Type::Name && at_operator("=", 1)) {
        std::string key = expect_name();
        ++token_;
        e->keyword.emplace_back(key, parse_expression());
      } else {
        e->children.push_back(parse_expression());
      }
      if (!accept(",")) {
        expect(")");
        break;
      }
    }
    return e;
  }

  ExprPtr parse_filters_and_tests(ExprPtr e) {
    while (true) {
      const int line = peek().line;
      if (accept("|")) {
        ExprPtr filter = make(Expr::Kind::Filter, line, {e}, expect_name());
        if (!is_filter(filter->name)) fail(line, "unknown filter '" + filter->name + "'");
        e = at_operator("(") ? parse_call_arguments(filter) : filter;
      } else if (at_name("is")) {
        ++token_;
        const bool negated = accept_name("not");
        auto test = std::const_pointer_cast<Expr>(make(Expr::Kind::Test, line, {e}, expect_name()));
        if (!is_test(test->name)) fail(line, "unknown test '" + test->name + "'");
        test->negated = negated;
        const Token& t = peek();
        if (at_operator("(")) {
          parse_call_arguments(test);
        } else if ((t.type == Token::Type::Name || t.type == Token::Type::String || t.type == Token::Type::Integer ||
                    t.type == Token::Type::Float || at_operator("[") || at_operator("{")) &&
                   !at_name("else") && !at_name("or") && !at_name("and") && !at_name("if")) {
          test->children.push_back(parse_postfix(parse_primary()));  // `is equalto 'x'`
        }
        e = test;
      } else if (at_operator("(")) {
        e = parse_call_arguments(make(Expr::Kind::Call, line, {e}));
      } else {
        return e;
      }
    }
  }

  std::vector<Segment> segments_;
  std::string name_;
  size_t segment_ = 0;
  const std::vector<Token>* tokens_ = nullptr;
  size_t token_ = 0;
};

}  // namespace

std::vector<Node> parse_template(const std::string& source, const std::string& name) {
  return Parser(Lexer(source, name).run(), name).parse_all();
}

}  // namespace areal::jinja
