print("hello sweep")
