
 
alice€Ð•ÿ¼1^KÈ=[D@!ªñÒMb€RÀ