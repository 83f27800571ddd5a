#include "areal/reward/math_grader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>
#include <vector>

#include "areal/util/strings.h"

namespace areal {

std::optional<std::string> last_boxed(const std::string& text) {
  size_t at = text.rfind("\\boxed{");
  if (at == std::string::npos) return std::nullopt;
  size_t start = at + 7, depth = 1;
  for (size_t i = start; i < text.size(); ++i) {
    if (text[i] == '{') ++depth;
    if (text[i] == '}' && --depth == 0) return text.substr(start, i - start);
  }
  return std::nullopt;  // unbalanced
}

std::optional<std::string> extract_math_answer(const std::string& text) {
  if (auto boxed = last_boxed(text)) return trim(*boxed);
  if (size_t hashes = text.rfind("####"); hashes != std::string::npos) return trim(text.substr(hashes + 4));
  static const std::regex number(R"(-?\d[\d,]*(\.\d+)?(/\d+)?)");
  std::optional<std::string> last;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), number); it != std::sregex_iterator(); ++it)
    last = it->str();
  return last;
}

namespace {

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size()) text.replace(at, from.size(), to);
}

// An answer without what it carries besides its value, in one spelling: a whole answer
// in \text{} is its words ("\text{(C)}"), other \text{} are units ("70 \text{ cm}"); no
// spacing commands, spaces, dollar signs, degrees, \left / \right; \dfrac and \tfrac are
// \frac; \sqrt2 is \sqrt{2}, \frac12 is \frac{1}{2}; "{,}" is a thousands comma; a single
// variable's "x =" or "x \in" goes.
std::string normalize(const std::string& raw) {
  static const std::regex whole_text(R"(^\\(text|textbf|mbox|mathrm)\{([^{}]*)\}$)");
  static const std::regex text_units(R"(\\(text|mbox|mathrm)\{[^{}]*\})");
  static const std::regex spacing(R"(\\[!,;: ])");
  static const std::regex sizing(R"(\\(left|right|displaystyle)(?![A-Za-z]))");
  static const std::regex short_sqrt(R"(\\sqrt([0-9A-Za-z]))");
  static const std::regex short_frac(R"(\\frac(\d)(\d))");
  static const std::regex variable(R"(^[A-Za-z](=|\\in))");
  std::string text = trim(raw);
  std::smatch m;
  if (std::regex_match(text, m, whole_text))
    text = m[2];
  else
    text = std::regex_replace(text, text_units, "");
  text = std::regex_replace(text, spacing, "");
  text = std::regex_replace(text, sizing, "");
  for (const char* frac : {"\\dfrac", "\\tfrac"}) replace_all(text, frac, "\\frac");
  for (const char* degrees : {"^{\\circ}", "^\\circ", "\\circ", "\xc2\xb0"}) replace_all(text, degrees, "");
  replace_all(text, "\\$", "");
  replace_all(text, "$", "");
  replace_all(text, "\\%", "%");
  replace_all(text, "{,}", ",");
  text.erase(std::remove_if(text.begin(), text.end(), [](unsigned char c) { return std::isspace(c); }), text.end());
  while (!text.empty() && text.back() == '.') text.pop_back();  // "42." at a sentence's end
  text = std::regex_replace(text, short_sqrt, "\\sqrt{$1}");
  text = std::regex_replace(text, short_frac, "\\frac{$1}{$2}");
  return std::regex_replace(text, variable, "");
}

// A closed form of numbers read by recursive descent: + - * / ^, \cdot, \times, \frac,
// \sqrt (and \sqrt[n]), \pi, braces and parentheses, implicit products (2\sqrt{5}, 3\pi),
// mixed numbers (4\frac{2}{3} = 14/3, as math-verify reads them), thousands commas
// (12,345.5), a trailing percent. Anything else (a variable, a list) reads as nothing.
class ValueReader {
 public:
  explicit ValueReader(const std::string& text) : s_(text) {}

  struct Value {
    double number;
    bool percent;
  };
  std::optional<Value> read() {
    std::optional<double> v = sum();
    const bool percent = eat("%");
    if (!v || at_ != s_.size() || !std::isfinite(*v)) return std::nullopt;
    return Value{*v, percent};
  }

 private:
  bool eat(const char* token) {
    const size_t n = std::char_traits<char>::length(token);
    if (s_.compare(at_, n, token) != 0) return false;
    at_ += n;
    return true;
  }
  bool digit_at(size_t i) const { return i < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i])); }
  bool starts_factor() const {
    if (digit_at(at_) || (at_ < s_.size() && (s_[at_] == '(' || s_[at_] == '{'))) return true;
    for (const char* command : {"\\frac", "\\sqrt", "\\pi"})
      if (s_.compare(at_, std::char_traits<char>::length(command), command) == 0) return true;
    return false;
  }

  std::optional<double> sum() {
    std::optional<double> v = product();
    while (v) {
      if (eat("+")) {
        std::optional<double> r = product();
        if (!r) return std::nullopt;
        *v += *r;
      } else if (eat("-")) {
        std::optional<double> r = product();
        if (!r) return std::nullopt;
        *v -= *r;
      } else {
        break;
      }
    }
    return v;
  }
  std::optional<double> product() {
    std::optional<double> v = signed_power();
    while (v) {
      if (eat("*") || eat("\\cdot") || eat("\\times")) {
        std::optional<double> r = signed_power();
        if (!r) return std::nullopt;
        *v *= *r;
      } else if (eat("/")) {
        std::optional<double> r = signed_power();
        if (!r || *r == 0) return std::nullopt;
        *v /= *r;
      } else if (starts_factor()) {  // implicit: 2\sqrt{5}, 3\pi, 2(3)
        std::optional<double> r = power();
        if (!r) return std::nullopt;
        *v *= *r;
      } else {
        break;
      }
    }
    return v;
  }
  std::optional<double> signed_power() {
    if (eat("-")) {
      std::optional<double> v = signed_power();
      return v ? std::optional<double>(-*v) : std::nullopt;
    }
    if (eat("+")) return signed_power();
    return power();
  }
  std::optional<double> power() {
    std::optional<double> base = atom();
    if (!base || !eat("^")) return base;
    std::optional<double> exponent = digit_at(at_) ? std::optional<double>(s_[at_++] - '0') : atom();  // 2^10 is 2^1 0
    if (!exponent) return std::nullopt;
    return std::pow(*base, *exponent);
  }
  std::optional<double> braced() {
    if (!eat("{")) return std::nullopt;
    std::optional<double> v = sum();
    return v && eat("}") ? v : std::nullopt;
  }
  std::optional<double> number() {
    static const std::regex thousands(R"(^\d{1,3}(,\d{3})+(\.\d+)?)");
    static const std::regex plain(R"(^(\d+(\.\d*)?|\.\d+))");
    std::smatch m;
    const std::string rest = s_.substr(at_);
    if (!std::regex_search(rest, m, thousands) && !std::regex_search(rest, m, plain)) return std::nullopt;
    std::string digits = m.str();
    at_ += digits.size();
    replace_all(digits, ",", "");
    return std::stod(digits);
  }
  // A mixed number's fraction part right after its whole part: \frac{2}{3} of integers.
  std::optional<double> mixed_fraction() {
    static const std::regex integer_frac(R"(^\\frac\{(\d+)\}\{(\d+)\})");
    std::smatch m;
    const std::string rest = s_.substr(at_);
    if (!std::regex_search(rest, m, integer_frac) || std::stod(m[2]) == 0) return std::nullopt;
    at_ += m.str().size();
    return std::stod(m[1]) / std::stod(m[2]);
  }
  std::optional<double> atom() {
    if (digit_at(at_) || (at_ < s_.size() && s_[at_] == '.')) {
      const size_t start = at_;
      std::optional<double> v = number();
      if (v && s_.substr(start, at_ - start).find('.') == std::string::npos)  // a whole part
        if (std::optional<double> part = mixed_fraction()) return *v + *part;
      return v;
    }
    if (s_.compare(at_, 1, "{") == 0) return braced();
    if (eat("(")) {
      std::optional<double> v = sum();
      return v && eat(")") ? v : std::nullopt;
    }
    if (eat("\\frac")) {
      std::optional<double> n = braced(), d = braced();
      if (!n || !d || *d == 0) return std::nullopt;
      return *n / *d;
    }
    if (eat("\\sqrt")) {
      double degree = 2;
      if (eat("[")) {
        std::optional<double> k = sum();
        if (!k || !eat("]") || *k == 0) return std::nullopt;
        degree = *k;
      }
      std::optional<double> v = braced();
      if (!v || *v < 0) return std::nullopt;
      return std::pow(*v, 1.0 / degree);
    }
    if (eat("\\pi")) return M_PI;
    return std::nullopt;
  }

  const std::string& s_;
  size_t at_ = 0;
};

bool numbers_equal(double x, double y) { return std::abs(x - y) <= 1e-9 * std::max({1.0, std::abs(x), std::abs(y)}); }

// Equal values; a percent also equals its fraction (5\% = 5 = 0.05, as math-verify).
bool values_equal(const ValueReader::Value& a, const ValueReader::Value& b) {
  if (numbers_equal(a.number, b.number)) return true;
  if (a.percent && numbers_equal(a.number / 100, b.number)) return true;
  return b.percent && numbers_equal(a.number, b.number / 100);
}

// The elements of a normalized answer split at its top-level commas.
std::vector<std::string> top_level_items(const std::string& text) {
  std::vector<std::string> items(1);
  int depth = 0;
  for (char c : text) {
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (c == ',' && depth == 0)
      items.emplace_back();
    else
      items.back().push_back(c);
  }
  return items;
}

// A tuple or interval "(a,b)" / "[a,b)" (ordered, its brackets kept), a set "\{a,b\}"
// or a bare list "a,b" (any order); nothing for one element.
struct Compound {
  bool ordered = false;
  char open = 0, close = 0;
  std::vector<std::string> items;
};
std::optional<Compound> compound(const std::string& text) {
  Compound c;
  std::string inner = text;
  if (text.size() >= 4 && text.rfind("\\{", 0) == 0 && text.compare(text.size() - 2, 2, "\\}") == 0) {
    inner = text.substr(2, text.size() - 4);
  } else if (text.size() >= 2 && (text.front() == '(' || text.front() == '[') &&
             (text.back() == ')' || text.back() == ']')) {
    // The first bracket must close at the end: "(1,2)" is a tuple, "(1)+(2)" is not.
    int depth = 0;
    size_t closes = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '(' || text[i] == '[') ++depth;
      if ((text[i] == ')' || text[i] == ']') && --depth == 0) {
        closes = i;
        break;
      }
    }
    if (closes == text.size() - 1) {
      c.ordered = true;
      c.open = text.front();
      c.close = text.back();
      inner = text.substr(1, text.size() - 2);
    }
  }
  c.items = top_level_items(inner);
  if (c.items.size() < 2) return std::nullopt;
  return c;
}

bool same_answer(const std::string& a, const std::string& b);

bool compounds_equal(const Compound& x, const Compound& y) {
  if (x.ordered != y.ordered || x.items.size() != y.items.size()) return false;
  if (x.ordered) {
    if (x.open != y.open || x.close != y.close) return false;  // (a, b) is not [a, b]
    for (size_t i = 0; i < x.items.size(); ++i)
      if (!same_answer(x.items[i], y.items[i])) return false;
    return true;
  }
  std::vector<bool> used(y.items.size(), false);  // any order: each item matches one
  for (const std::string& item : x.items) {
    bool found = false;
    for (size_t j = 0; j < y.items.size() && !found; ++j)
      if (!used[j] && same_answer(item, y.items[j])) used[j] = found = true;
    if (!found) return false;
  }
  return true;
}

// Two normalized answers.
bool same_answer(const std::string& a, const std::string& b) {
  if (a == b) return true;
  const auto x = ValueReader(a).read(), y = ValueReader(b).read();
  if (x && y) return values_equal(*x, *y);
  if (x || y) return false;
  const auto cx = compound(a), cy = compound(b);
  return cx && cy && compounds_equal(*cx, *cy);
}

}  // namespace

std::optional<double> parse_math_number(const std::string& text) {
  const auto value = ValueReader(normalize(text)).read();
  return value ? std::optional<double>(value->number) : std::nullopt;
}

bool math_answers_equal(const std::string& a, const std::string& b) { return same_answer(normalize(a), normalize(b)); }

}  // namespace areal
