#include "areal/text/jinja_builtins.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <set>
#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

namespace areal::jinja {
namespace {

[[noreturn]] void fail(const std::string& what) { throw EvalError(what); }

// An Undefined used where a value is needed.
void require_defined(const Value& v) {
  if (v.is_undefined()) fail(v.undefined_reason().empty() ? "a value is undefined" : v.undefined_reason());
}

const std::u32string kWhitespace = U" \t\n\r\v\f\x1c\x1d\x1e\x1f\x85\xa0";

std::string strip_chars(const std::string& s, const Value& chars, bool left, bool right) {
  const std::u32string text = utf8_to_utf32(s);
  const std::u32string set = chars.is_string() ? utf8_to_utf32(chars.as_string()) : kWhitespace;
  size_t begin = 0, end = text.size();
  if (left)
    while (begin < end && set.find(text[begin]) != std::u32string::npos) ++begin;
  if (right)
    while (end > begin && set.find(text[end - 1]) != std::u32string::npos) --end;
  return utf32_to_utf8(text.substr(begin, end - begin));
}

// Python's str.upper() / str.lower(): full Unicode case mapping ("ß".upper() == "SS").
std::string change_case(const std::string& s, bool upper) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  if (upper) u.toUpper(icu::Locale::getRoot());
  else u.toLower(icu::Locale::getRoot());
  std::string out;
  return u.toUTF8String(out);
}

ValueList split_string(const std::string& s, const Value& sep, int64_t max_split) {
  ValueList parts;
  if (!sep.is_string() || sep.as_string().empty()) {
    if (sep.is_string()) fail("split: empty separator");
    // No separator: runs of whitespace, none at the ends.
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) break;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
        std::string rest = s.substr(i);
        while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.back()))) rest.pop_back();
        parts.emplace_back(rest);
        break;
      }
      size_t j = i;
      while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
      parts.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return parts;
  }
  const std::string& d = sep.as_string();
  size_t start = 0;
  while (true) {
    const size_t at = s.find(d, start);
    if (at == std::string::npos || (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split)) {
      parts.emplace_back(s.substr(start));
      return parts;
    }
    parts.emplace_back(s.substr(start, at - start));
    start = at + d.size();
  }
}

bool prefix_match(const std::string& s, const Value& prefix, bool at_end) {
  auto one = [&](const Value& p) {
    if (!p.is_string()) fail("startswith/endswith take a string or a tuple of strings");
    const std::string& x = p.as_string();
    return x.size() <= s.size() && (at_end ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0);
  };
  if (prefix.is_list()) return std::any_of(prefix.list().begin(), prefix.list().end(), one);
  return one(prefix);
}

// Python's str.title() (a letter after a cased one is lowered, others title-cased) and
// str.capitalize() (the first character title-cased, the rest lowered).
std::string title_case(const std::string& s, bool only_first) {
  std::u32string text = utf8_to_utf32(s);
  bool previous_cased = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const UChar32 c = static_cast<UChar32>(text[i]);
    const bool upper = only_first ? i == 0 : !previous_cased;
    text[i] = static_cast<char32_t>(upper ? u_totitle(c) : u_tolower(c));
    previous_cased = u_hasBinaryProperty(c, UCHAR_CASED);
  }
  return utf32_to_utf8(text);
}

Value string_method(const std::string& s, const std::string& name) {
  auto method = [](auto fn) { return Value(Function(fn)); };
  if (name == "startswith" || name == "endswith")
    return method([s, at_end = name == "endswith"](const Arguments& a) {
      return Value(prefix_match(s, a.get(0, "prefix", Value()), at_end));
    });
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return method([s, name](const Arguments& a) {
      return Value(strip_chars(s, a.get(0, "chars", Value()), name != "rstrip", name != "lstrip"));
    });
  if (name == "split")
    return method([s](const Arguments& a) {
      const Value& max = a.get(1, "maxsplit", Value(-1));
      return Value(split_string(s, a.get(0, "sep", Value::none()), max.as_int()));
    });
  if (name == "rsplit")
    return method([s](const Arguments& a) {
      const Value& sep = a.get(0, "sep", Value::none());
      const int64_t max = a.get(1, "maxsplit", Value(-1)).as_int();
      if (max < 0 || !sep.is_string()) return Value(split_string(s, sep, max));
      ValueList parts;  // from the right: split the last `max` separators
      std::string rest = s;
      const std::string& d = sep.as_string();
      for (int64_t k = 0; k < max; ++k) {
        const size_t at = rest.rfind(d);
        if (at == std::string::npos) break;
        parts.insert(parts.begin(), Value(rest.substr(at + d.size())));
        rest = rest.substr(0, at);
      }
      parts.insert(parts.begin(), Value(rest));
      return Value(parts);
    });
  if (name == "upper") return method([s](const Arguments&) { return Value(change_case(s, true)); });
  if (name == "lower") return method([s](const Arguments&) { return Value(change_case(s, false)); });
  if (name == "title") return method([s](const Arguments&) { return Value(title_case(s, false)); });
  if (name == "capitalize") return method([s](const Arguments&) { return Value(title_case(s, true)); });
  if (name == "replace")
    return method([s](const Arguments& a) {
      return apply_filter("replace", Value(s), Arguments{{a.get(0, "old", Value("")), a.get(1, "new", Value("")),
                                                          a.get(2, "count", Value(-1))}, {}});
    });
  if (name == "find" || name == "count")
    return method([s, name](const Arguments& a) {
      const Value& sub = a.get(0, "sub", Value(""));
      if (!sub.is_string()) fail(name + ": the argument must be a string");
      const std::string& x = sub.as_string();
      if (name == "find") {
        const size_t at = s.find(x);
        return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(utf8_to_utf32(s.substr(0, at)).size()));
      }
      if (x.empty()) return Value(static_cast<int64_t>(utf8_to_utf32(s).size() + 1));
      int64_t n = 0;
      for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + x.size())) ++n;
      return Value(n);
    });
  if (name == "join")
    return method([s](const Arguments& a) {
      std::string out;
      bool first = true;
      for (const Value& item : iterate(a.get(0, "iterable", Value()))) {
        if (!item.is_string()) fail("str.join: an item is not a string (" + item.type_name() + ")");
        out += (first ? "" : s) + item.as_string();
        first = false;
      }
      return Value(out);
    });
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum")
    return method([s, name](const Arguments&) {
      if (s.empty()) return Value(false);
      int (*test)(int) = name == "isdigit" ? ::isdigit : name == "isalpha" ? ::isalpha : name == "isspace" ? ::isspace : ::isalnum;
      return Value(std::all_of(s.begin(), s.end(), [&](char c) { return test(static_cast<unsigned char>(c)) != 0; }));
    });
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

Value dict_method(const Value& d, const std::string& name) {
  if (name == "items")
    return Value(Function([d](const Arguments&) {
      ValueList items;
      for (const auto& [k, v] : d.dict()) items.emplace_back(ValueList{Value(k), v});
      return Value(items);
    }));
  if (name == "keys" || name == "values")
    return Value(Function([d, keys = name == "keys"](const Arguments&) {
      ValueList items;
      for (const auto& [k, v] : d.dict()) items.push_back(keys ? Value(k) : v);
      return Value(items);
    }));
  if (name == "get")
    return Value(Function([d](const Arguments& a) {
      const Value& key = a.get(0, "key", Value());
      const Value* found = key.is_string() ? d.find(key.as_string()) : nullptr;
      return found ? *found : a.get(1, "default", Value::none());
    }));
  return Value();
}

Value number_argument(const Value& v, const char* what) {
  if (!v.is_number()) fail(std::string(what) + ": expected a number, got " + v.type_name());
  return v;
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.as_string().compare(b.as_string()) < 0 ? -1 : a.as_string() == b.as_string() ? 0 : 1;
  if (a.is_list() && b.is_list()) {
    for (size_t i = 0; i < std::min(a.list().size(), b.list().size()); ++i)
      if (int c = compare(a.list()[i], b.list()[i])) return c;
    return a.list().size() < b.list().size() ? -1 : a.list().size() > b.list().size() ? 1 : 0;
  }
  require_defined(a);
  require_defined(b);
  fail("'<' is not supported between '" + a.type_name() + "' and '" + b.type_name() + "'");
}

Value slice_of_attribute(const Value& item, const std::string& attribute) {
  Value v = item;
  for (const Value& part : split_string(attribute, Value("."), -1)) v = get_item(v, part);
  return v;
}

// The tests and their arguments for select/reject/selectattr/rejectattr: args after `skip`.
bool passes(const Value& item, const Arguments& args, size_t skip) {
  if (args.positional.size() <= skip) return item.truthy();
  const Value& test = args.positional[skip];
  if (!test.is_string()) fail("select/reject: the test name must be a string");
  Arguments rest;
  rest.positional.assign(args.positional.begin() + static_cast<long>(skip) + 1, args.positional.end());
  return apply_test(test.as_string(), item, rest);
}

int64_t python_floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

bool is_filter(const std::string& name) {
  static const std::set<std::string> names = {
      "abs",   "capitalize", "count", "d",      "default", "first",  "float",      "indent",     "int",     "items",
      "join",  "last",       "length", "list",  "lower",   "map",    "max",        "min",        "reject",  "rejectattr",
      "replace", "reverse",  "round", "safe",   "select",  "selectattr", "sort",     "string",     "sum",     "title",
      "tojson", "trim",      "unique", "upper"};
  return names.count(name) > 0;
}

bool is_test(const std::string& name) {
  static const std::set<std::string> names = {
      "boolean", "callable", "defined", "divisibleby", "eq",      "equalto", "even",    "false", "float",
      "ge",      "greaterthan", "gt",   "in",          "integer", "iterable", "le",     "lessthan", "lower",
      "lt",      "mapping",  "ne",      "none",        "number",  "odd",      "sameas", "sequence", "string",
      "true",    "undefined", "upper", "==", "!=", "<", ">", "<=", ">="};
  return names.count(name) > 0;
}

int64_t length(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return 0;
    case Value::Type::String: return static_cast<int64_t>(utf8_to_utf32(v.as_string()).size());
    case Value::Type::List: return static_cast<int64_t>(v.list().size());
    case Value::Type::Dict: return static_cast<int64_t>(v.dict().size());
    default: fail("object of type '" + v.type_name() + "' has no len()");
  }
}

ValueList iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return {};
    case Value::Type::List: return v.list();
    case Value::Type::Dict: {
      ValueList keys;
      for (const auto& [k, x] : v.dict()) keys.emplace_back(k);
      return keys;
    }
    case Value::Type::String: {
      ValueList chars;
      for (char32_t c : utf8_to_utf32(v.as_string())) chars.emplace_back(utf32_to_utf8(std::u32string(1, c)));
      return chars;
    }
    default: fail("'" + v.type_name() + "' object is not iterable");
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::Undefined: return false;
    case Value::Type::String:
      if (!item.is_string()) fail("'in <string>' requires a string as the left operand, not " + item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Type::List: return std::find(container.list().begin(), container.list().end(), item) != container.list().end();
    case Value::Type::Dict: return item.is_string() && container.find(item.as_string()) != nullptr;
    default: fail("argument of type '" + container.type_name() + "' is not iterable");
  }
}

Value binary_operator(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.str() + b.str());
  if (op == "==") return Value(a == b);
  if (op == "!=") return Value(a != b);
  if (op == "in") return Value(contains(b, a));
  if (op == "not in") return Value(!contains(b, a));
  if (op == "<") return Value(compare(a, b) < 0);
  if (op == ">") return Value(compare(a, b) > 0);
  if (op == "<=") return Value(compare(a, b) <= 0);
  if (op == ">=") return Value(compare(a, b) >= 0);
  require_defined(a);
  require_defined(b);
  const bool ints = a.is_number() && b.is_number() && a.type() != Value::Type::Float && b.type() != Value::Type::Float;
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list()) {
      ValueList items = a.list();
      items.insert(items.end(), b.list().begin(), b.list().end());
      return Value(items);
    }
    if (ints) return Value(a.as_int() + b.as_int());
    if (a.is_number() && b.is_number()) return Value(a.as_double() + b.as_double());
  } else if (op == "-" && a.is_number() && b.is_number()) {
    return ints ? Value(a.as_int() - b.as_int()) : Value(a.as_double() - b.as_double());
  } else if (op == "*") {
    if (ints) return Value(a.as_int() * b.as_int());
    if (a.is_number() && b.is_number()) return Value(a.as_double() * b.as_double());
    const Value& seq = a.is_number() ? b : a;
    const Value& times = a.is_number() ? a : b;
    if (times.type() != Value::Type::Float && times.is_number() && (seq.is_string() || seq.is_list())) {
      if (seq.is_string()) {
        std::string out;
        for (int64_t i = 0; i < times.as_int(); ++i) out += seq.as_string();
        return Value(out);
      }
      ValueList out;
      for (int64_t i = 0; i < times.as_int(); ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
      return Value(out);
    }
  } else if ((op == "/" || op == "//" || op == "%") && a.is_number() && b.is_number()) {
    if (b.as_double() == 0) fail("division by zero");
    if (op == "/") return Value(a.as_double() / b.as_double());
    if (ints) {
      const int64_t q = python_floor_div(a.as_int(), b.as_int());
      return op == "//" ? Value(q) : Value(a.as_int() - q * b.as_int());
    }
    const double q = std::floor(a.as_double() / b.as_double());
    return op == "//" ? Value(q) : Value(a.as_double() - q * b.as_double());
  } else if (op == "**" && a.is_number() && b.is_number()) {
    if (ints && b.as_int() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < b.as_int(); ++i) r *= a.as_int();
      return Value(r);
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  fail("unsupported operand types for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

Value get_attribute(const Value& object, const std::string& name) {
  require_defined(object);
  if (object.is_namespace()) {
    if (const Value* v = object.find(name)) return *v;
    return Value::undefined("'Namespace' has no attribute '" + name + "'");
  }
  if (object.is_dict()) {
    if (Value method = dict_method(object, name); !method.is_undefined()) return method;
    if (const Value* v = object.find(name)) return *v;
    return Value::undefined("'dict object' has no attribute '" + name + "'");
  }
  if (object.is_string()) return string_method(object.as_string(), name);
  return Value::undefined("'" + object.type_name() + " object' has no attribute '" + name + "'");
}

Value get_item(const Value& object, const Value& key) {
  require_defined(object);
  if (object.is_dict() && key.is_string()) {
    if (const Value* v = object.find(key.as_string())) return *v;
  } else if ((object.is_list() || object.is_string()) && key.is_number() && key.type() != Value::Type::Float) {
    const bool text = object.is_string();
    const std::u32string chars = text ? utf8_to_utf32(object.as_string()) : std::u32string();
    const int64_t n = text ? static_cast<int64_t>(chars.size()) : static_cast<int64_t>(object.list().size());
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) return text ? Value(utf32_to_utf8(chars.substr(i, 1))) : object.list()[i];
    return Value::undefined("'" + object.type_name() + " object' has no element " + key.repr());
  }
  if (key.is_string()) return get_attribute(object, key.as_string());
  return Value::undefined("'" + object.type_name() + " object' has no item " + key.repr());
}

bool apply_test(const std::string& name, const Value& v, const Arguments& args) {
  const Value& arg = args.get(0, "other", Value());
  using T = Value::Type;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.type() == T::Bool;
  if (name == "false") return v.type() == T::Bool && !v.as_bool();
  if (name == "true") return v.type() == T::Bool && v.as_bool();
  if (name == "integer") return v.type() == T::Int;
  if (name == "float") return v.type() == T::Float;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return v.type() == T::Function;
  if (name == "equalto" || name == "eq" || name == "==") return v == arg;
  if (name == "ne" || name == "!=") return v != arg;
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, arg) < 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, arg) > 0;
  if (name == "le" || name == "<=") return compare(v, arg) <= 0;
  if (name == "ge" || name == ">=") return compare(v, arg) >= 0;
  if (name == "in") return contains(arg, v);
  if (name == "sameas") return v.type() == arg.type() && (v.is_none() || v.is_undefined() || v == arg);
  if (name == "odd" || name == "even") {
    number_argument(v, name.c_str());
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") return number_argument(v, "divisibleby").as_int() % number_argument(arg, "divisibleby").as_int() == 0;
  if (name == "lower" || name == "upper")
    return v.is_string() && v.as_string() == change_case(v.as_string(), name == "upper");
  fail("unknown test '" + name + "'");
}

Value apply_filter(const std::string& name, const Value& v, const Arguments& args) {
  if (name == "default" || name == "d") {
    const bool boolean = args.get(1, "boolean", Value(false)).truthy();
    return (v.is_undefined() || (boolean && !v.truthy())) ? args.get(0, "default_value", Value("")) : v;
  }
  if (name == "length" || name == "count") return Value(length(v));
  if (name == "string") return Value(v.str());
  if (name == "safe") return v;
  if (name == "list") return Value(iterate(v));
  if (name == "tojson") {
    const Value& indent = args.get(1, "indent", Value::none());
    const Value& separators = args.get(2, "separators", Value::none());
    const bool sort_keys = args.get(3, "sort_keys", Value(false)).truthy();
    if (args.get(0, "ensure_ascii", Value(false)).truthy()) fail("tojson: ensure_ascii=True is not supported");
    std::string item_sep, key_sep = ": ";
    if (separators.is_list() && separators.list().size() == 2) {
      item_sep = separators.list()[0].str();
      key_sep = separators.list()[1].str();
    }
    return Value(v.to_json(indent.is_none() ? -1 : static_cast<int>(indent.as_int()), item_sep, key_sep, sort_keys));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value(ValueList{});
    if (!v.is_dict()) fail("items: expected a mapping, got " + v.type_name());
    return get_attribute(v, "items").function()(Arguments{});
  }
  if (name == "first" || name == "last") {
    ValueList items = iterate(v);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::u32string s = utf8_to_utf32(v.as_string());
      std::reverse(s.begin(), s.end());
      return Value(utf32_to_utf8(s));
    }
    ValueList items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value(items);
  }
  if (name == "join") {
    const Value& attribute = args.get(1, "attribute", Value::none());
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      out += (first ? "" : args.get(0, "d", Value("")).str()) +
             (attribute.is_none() ? item : slice_of_attribute(item, attribute.str())).str();
      first = false;
    }
    return Value(out);
  }
  if (name == "select" || name == "reject") {
    ValueList out;
    for (const Value& item : iterate(v))
      if (passes(item, args, 0) == (name == "select")) out.push_back(item);
    return Value(out);
  }
  if (name == "selectattr" || name == "rejectattr") {
    if (args.positional.empty()) fail(name + ": needs an attribute name");
    ValueList out;
    for (const Value& item : iterate(v))
      if (passes(slice_of_attribute(item, args.positional[0].str()), args, 1) == (name == "selectattr"))
        out.push_back(item);
    return Value(out);
  }
  if (name == "map") {
    ValueList out;
    const Value& attribute = args.get(99, "attribute", Value());
    for (const Value& item : iterate(v)) {
      if (!attribute.is_undefined()) {
        Value x = slice_of_attribute(item, attribute.str());
        out.push_back(x.is_undefined() ? args.get(99, "default", Value()) : x);
      } else if (!args.positional.empty() && args.positional[0].is_string()) {
        Arguments rest{ValueList(args.positional.begin() + 1, args.positional.end()), args.keyword};
        out.push_back(apply_filter(args.positional[0].as_string(), item, rest));
      } else {
        fail("map: needs a filter name or attribute=");
      }
    }
    return Value(out);
  }
  if (name == "unique") {
    ValueList out;
    for (const Value& item : iterate(v))
      if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
    return Value(out);
  }
  if (name == "sort") {
    ValueList items = iterate(v);
    const bool reverse = args.get(0, "reverse", Value(false)).truthy();
    const Value& attribute = args.get(2, "attribute", Value::none());
    auto key = [&](const Value& x) { return attribute.is_none() ? x : slice_of_attribute(x, attribute.str()); };
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      return reverse ? compare(key(b), key(a)) < 0 : compare(key(a), key(b)) < 0;
    });
    return Value(items);
  }
  if (name == "sum") {
    Value total = args.get(1, "start", Value(0));
    for (const Value& item : iterate(v)) total = binary_operator("+", total, item);
    return total;
  }
  if (name == "min" || name == "max") {
    ValueList items = iterate(v);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    Value best = items[0];
    for (const Value& item : items)
      if ((name == "min" && compare(item, best) < 0) || (name == "max" && compare(item, best) > 0)) best = item;
    return best;
  }
  if (name == "int") {
    if (v.is_number()) return Value(static_cast<int64_t>(v.as_double()));
    if (v.is_string()) {
      try {
        size_t used = 0;
        const std::string t = strip_chars(v.as_string(), Value(), true, true);
        const int64_t i = std::stoll(t, &used);
        if (used == t.size()) return Value(i);
      } catch (const std::exception&) {
      }
    }
    return args.get(0, "default", Value(0));
  }
  if (name == "float") {
    if (v.is_number()) return Value(v.as_double());
    if (v.is_string()) {
      try {
        return Value(std::stod(v.as_string()));
      } catch (const std::exception&) {
      }
    }
    return args.get(0, "default", Value(0.0));
  }
  if (name == "abs") {
    number_argument(v, "abs");
    return v.type() == Value::Type::Float ? Value(std::fabs(v.as_double())) : Value(static_cast<int64_t>(std::llabs(v.as_int())));
  }
  if (name == "round") {
    const int64_t precision = args.get(0, "precision", Value(0)).as_int();
    const double scale = std::pow(10.0, static_cast<double>(precision));
    return Value(std::nearbyint(number_argument(v, "round").as_double() * scale) / scale);  // Python: half to even
  }
  require_defined(v);
  if (!v.is_string() && (name == "trim" || name == "lower" || name == "upper" || name == "title" ||
                         name == "capitalize" || name == "replace" || name == "indent"))
    return apply_filter(name, Value(v.str()), args);
  const std::string& s = v.as_string();
  if (name == "trim") return Value(strip_chars(s, args.get(0, "chars", Value()), true, true));
  if (name == "lower") return Value(change_case(s, false));
  if (name == "upper") return Value(change_case(s, true));
  if (name == "title") return Value(title_case(s, false));
  if (name == "capitalize") return Value(title_case(s, true));
  if (name == "replace") {
    const std::string old_text = args.get(0, "old", Value("")).str(), new_text = args.get(1, "new", Value("")).str();
    int64_t count = args.get(2, "count", Value(-1)).as_int();
    if (old_text.empty()) fail("replace: an empty search string is not supported");
    std::string out;
    size_t start = 0;
    for (size_t at = s.find(old_text); at != std::string::npos && count != 0; at = s.find(old_text, start), --count) {
      out += s.substr(start, at - start) + new_text;
      start = at + old_text.size();
    }
    return Value(out + s.substr(start));
  }
  if (name == "indent") {
    const Value& width = args.get(0, "width", Value(4));
    const std::string pad = width.is_string() ? width.as_string() : std::string(static_cast<size_t>(width.as_int()), ' ');
    const bool first = args.get(1, "first", Value(false)).truthy(), blank = args.get(2, "blank", Value(false)).truthy();
    ValueList lines = split_string(s, Value("\n"), -1);
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string& line = lines[i].as_string();
      const bool indent = (i > 0 || first) && (blank || !strip_chars(line, Value(), true, true).empty());
      out += (i ? "\n" : "") + (indent ? pad : "") + line;
    }
    return Value(out);
  }
  fail("unknown filter '" + name + "'");
}

Value global_function(const std::string& name) {
  if (name == "range")
    return Value(Function([](const Arguments& a) {
      int64_t start = 0, stop = 0, step = 1;
      if (a.positional.size() == 1) stop = a.positional[0].as_int();
      else if (a.positional.size() >= 2) start = a.positional[0].as_int(), stop = a.positional[1].as_int();
      if (a.positional.size() >= 3) step = a.positional[2].as_int();
      if (step == 0) fail("range: step must not be zero");
      ValueList out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
      return Value(out);
    }));
  if (name == "namespace" || name == "dict")
    return Value(Function([is_namespace = name == "namespace"](const Arguments& a) {
      ValueDict items;
      for (const Value& p : a.positional) {
        if (!p.is_dict()) fail("namespace()/dict(): a positional argument must be a mapping");
        items.insert(items.end(), p.dict().begin(), p.dict().end());
      }
      for (const auto& [k, v] : a.keyword) {
        auto it = std::find_if(items.begin(), items.end(), [&](const auto& kv) { return kv.first == k; });
        if (it != items.end()) it->second = v;
        else items.emplace_back(k, v);
      }
      return Value(items, is_namespace);
    }));
  if (name == "raise_exception")
    return Value(Function([](const Arguments& a) -> Value {
      fail("the template raised: " + a.get(0, "message", Value("")).str());
    }));
  if (name == "strftime_now")
    return Value(Function([](const Arguments& a) {
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buffer[256];
      const size_t n = std::strftime(buffer, sizeof buffer, a.get(0, "format", Value("")).str().c_str(), &local);
      return Value(std::string(buffer, n));
    }));
  return Value();
}

}  // namespace areal::jinja
